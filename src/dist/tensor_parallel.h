// Tensor parallelism (Megatron / vLLM style) for the models: which slice of each weight a rank
// binds, and the config a rank runs with.
//
//   column-parallel (rows of W split):  q/k/v by heads, gate/up by intermediate rows,
//                                       lm_head and the embedding by vocabulary rows
//   row-parallel (columns of W split):  o_proj by heads, down by intermediate columns;
//                                       their partial outputs are summed by ONE all-reduce
// A rank's config is the model's with its own head counts and intermediate size, so its KV
// pool holds only its KV heads and the layer code runs unchanged on the local shapes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/config.h"

namespace zen::dist {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

// Part `part` of `parts` of n items cut at multiples of `unit` (a quant block, a head): the
// first parts take ceil(units / parts) units, later ones what is left (possibly nothing).
Range split(int64_t n, int parts, int part, int64_t unit = 1);

// The layout of a job: pipeline_stages stages of size() ranks each (world rank = stage x
// size() + rank()). A grid (tensor parallelism inside pipeline stages) runs its tensor-parallel
// collectives on stage_comm, the ranks of one stage, and everything else on comm.
struct TensorParallel {
  Communicator* comm = nullptr;  // the job's ranks; null or size 1: one process
  Communicator* stage_comm = nullptr;  // a grid's: this rank's stage (split_stages); else null
  // MoE layers: whole experts per rank (--enable-expert-parallel), else every expert sliced
  // like an MLP (gate/up rows, down columns: vLLM's default); the shared expert and everything
  // else split as above either way.
  bool expert_parallel = false;
  int pipeline_stages = 1;  // P (--pipeline-parallel-size): whole layers per stage
  bool active() const { return comm != nullptr && comm->size() > 1; }  // several ranks, any layout
  int size() const { return comm != nullptr ? comm->size() / pipeline_stages : 1; }  // T
  int rank() const { return comm != nullptr ? comm->rank() % size() : 0; }  // within the stage
  int stage() const { return comm != nullptr ? comm->rank() / size() : 0; }
  int world_rank() const { return comm != nullptr ? comm->rank() : 0; }
  bool pipelined() const { return pipeline_stages > 1; }
  // Where the all-reduces and all-gathers of tensor parallelism go.
  Communicator& tp_comm() const { return stage_comm != nullptr ? *stage_comm : *comm; }
};

// A grid's stage communicator (a collective: every rank of comm calls it), which the caller
// keeps alive and sets as tp.stage_comm; null when tp is not a grid.
std::unique_ptr<Communicator> split_stages(const TensorParallel& tp);

// The layers [begin, end) of pipeline stage s of P (contiguous, as even as they come).
Range pipeline_layers(int64_t num_layers, int stages, int s);
// The same balanced by cost: contiguous stages of at least one layer each that minimize the
// largest stage's cost, the last stage also paying last_cost (the lm_head); ties keep the
// earlier stages smaller (rank 0, on the first, also schedules and samples).
Range pipeline_layers(const std::vector<double>& layer_cost, double last_cost, int stages, int s);

// The attention heads of rank r of t: query heads split evenly; KV heads split when t divides
// them, else each rank holds the one KV head its query heads read (replicated t / KV times).
struct HeadShard {
  Range q_heads, kv_heads;
};
HeadShard head_shard(const ModelConfig& cfg, int t, int r);

// Why cfg cannot run with tensor parallel size t ("" when it can): heads that do not split,
// model kinds not sharded yet, more expert-parallel ranks than experts.
std::string tensor_parallel_problem(const ModelConfig& cfg, int t, bool expert_parallel);
// Why cfg cannot run in P pipeline stages ("" when it can).
std::string pipeline_problem(const ModelConfig& cfg, int stages);

}  // namespace zen::dist
