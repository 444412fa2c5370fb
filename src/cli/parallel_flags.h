// --tensor-parallel-size (vLLM's name) for zen run, serve and bench, launched as
//   mpirun -np T zen serve --model M --tensor-parallel-size T
// Rank 0 runs the command (HTTP server, scheduler, sampling); the other ranks load their
// slices of the model and run the forwards rank 0 broadcasts. --enable-expert-parallel splits
// MoE layers by whole experts; --pipeline-parallel-size is accepted by name and refused as
// not implemented yet.
#pragma once
#include <string>
#include <vector>

#include "cli/flags.h"
#include "model/model.h"

namespace zen::cli {

std::vector<FlagSpec> with_parallel_flags(std::vector<FlagSpec> specs);
// Sets load.tensor_parallel from the flags and the MPI job; throws zen::Error when they
// disagree (T is not the number of ranks, mpirun without the flag). Without --threads each
// rank takes the cores it is bound to (or its share of the host's).
void apply_parallel_flags(const Flags& f, LoadOptions& load);
// On ranks other than 0: serves rank 0's steps until it is done, then returns true (the
// command exits). On rank 0 (and without tensor parallelism): false.
bool serve_as_worker(Model& model, const LoadOptions& load);
// "tensor parallel: ..." (what rank 0's collectives did), or "" without tensor parallelism.
std::string tensor_parallel_summary(const LoadOptions& load);

}  // namespace zen::cli
