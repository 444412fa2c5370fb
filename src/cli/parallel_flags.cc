#include "cli/parallel_flags.h"

#include <sched.h>

#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <thread>

#include "base/error.h"
#include "dist/communicator.h"

namespace zen::cli {
namespace {

// Cores this process may run on (mpirun binds each rank to its share).
int allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

}  // namespace

std::vector<FlagSpec> with_parallel_flags(std::vector<FlagSpec> specs) {
  specs.push_back({"tensor-parallel-size", FlagKind::Int,
                   "split every layer over this many MPI ranks (launch with mpirun -np N; default 1)", {}});
  specs.push_back({"pipeline-parallel-size", FlagKind::Int, "pipeline stages (not implemented yet; 1 only)", {}});
  specs.push_back({"enable-expert-parallel", FlagKind::Bool, "MoE layers: whole experts per rank (E / T each; the shared expert and the rest split by tensor parallelism)", {}});
  return specs;
}

void apply_parallel_flags(const Flags& f, LoadOptions& load) {
  dist::Communicator& world = dist::world();
  const int64_t tp = f.integer("tensor-parallel-size", 1);
  if (tp < 1) fail("--tensor-parallel-size must be at least 1, got ", tp);
  if (f.integer("pipeline-parallel-size", 1) != 1)
    fail("--pipeline-parallel-size: pipeline parallelism is not implemented yet (zen plan lays it out)");
  if (tp > 1 && world.size() == 1) {
    if (!dist::mpi_available())
      fail("--tensor-parallel-size ", tp, " needs MPI, and this zen was built without it (install libopenmpi-dev and rebuild)");
    fail("--tensor-parallel-size ", tp, " needs ", tp, " MPI ranks: launch with mpirun -np ", tp, " zen ...");
  }
  if (tp != world.size())
    fail("mpirun started ", world.size(), " ranks but --tensor-parallel-size is ", tp,
         " (tensor parallelism is the only layout so far: the two must be equal)");
  if (tp == 1) return;
  load.tensor_parallel.comm = &world;
  load.tensor_parallel.expert_parallel = f.flag("enable-expert-parallel");
  if (load.n_threads == 0) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int bound = allowed_cores();
    load.n_threads = bound > 0 && bound < hw ? bound : std::max(1, hw / dist::local_ranks());
  }
  if (world.rank() == 0)
    std::fprintf(stderr, "tensor parallel: %d ranks, %d threads each\n", world.size(), load.n_threads);
}

bool serve_as_worker(Model& model, const LoadOptions& load) {
  if (!load.tensor_parallel.active() || load.tensor_parallel.rank() == 0) return false;
  // mpirun forwards SIGTERM / SIGINT to every rank: rank 0 shuts down cleanly and then
  // releases this one, which must outlive it to be released (if rank 0 dies instead, mpirun
  // ends this process anyway).
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  model.serve_steps();
  return true;
}

std::string tensor_parallel_summary(const LoadOptions& load) {
  if (!load.tensor_parallel.active()) return "";
  const dist::Stats& s = load.tensor_parallel.comm->stats();
  const int64_t steps = s[dist::Op::Broadcast].calls;  // one step body per forward
  if (steps == 0) return "";
  std::string out = "tensor parallel (rank 0): " + std::to_string(steps) + " forwards;";
  for (dist::Op op : {dist::Op::AllReduce, dist::Op::AllGather}) {
    const dist::OpStats& o = s[op];
    char line[200];
    std::snprintf(line, sizeof(line), " %s %.1f calls (%.1f KiB) per forward,", dist::op_name(op),
                  static_cast<double>(o.calls) / static_cast<double>(steps),
                  o.bytes / 1024.0 / static_cast<double>(steps));
    out += line;
  }
  char tail[160];
  std::snprintf(tail, sizeof(tail), " %.3f ms per forward in collectives\n", 1e3 * s.seconds() / static_cast<double>(steps));
  return out + tail;
}

}  // namespace zen::cli
