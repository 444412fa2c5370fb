#include "cli/parallel_flags.h"

#include <sched.h>

#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <thread>

#include "base/error.h"
#include "dist/communicator.h"
#include "dist/tensor_parallel.h"

namespace zen::cli {
namespace {

// Cores this process may run on (mpirun binds each rank to its share).
int allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

// A grid's stage communicator, alive as long as the process (its models keep a pointer).
std::unique_ptr<dist::Communicator>& stage_comm_slot() {
  static std::unique_ptr<dist::Communicator> comm;
  return comm;
}

// "tensor parallel", "pipeline parallel" or "tensor parallel T x pipeline P".
std::string layout_name(const dist::TensorParallel& tp) {
  if (tp.pipelined() && tp.size() > 1)
    return "tensor parallel " + std::to_string(tp.size()) + " x pipeline " + std::to_string(tp.pipeline_stages);
  return tp.pipelined() ? "pipeline parallel" : "tensor parallel";
}

}  // namespace

std::vector<FlagSpec> with_parallel_flags(std::vector<FlagSpec> specs) {
  specs.push_back({"tensor-parallel-size", FlagKind::Int,
                   "split every layer over this many MPI ranks (launch with mpirun -np N; default 1)", {}});
  specs.push_back({"pipeline-parallel-size", FlagKind::Int, "split the layers into this many stages of --tensor-parallel-size ranks each (mpirun -np T x P; default 1)", {}});
  specs.push_back({"enable-expert-parallel", FlagKind::Bool, "MoE layers: whole experts per rank (E / T each) instead of every expert sliced; the shared expert and the rest split by tensor parallelism either way", {}});
  return specs;
}

void apply_parallel_flags(const Flags& f, LoadOptions& load) {
  dist::Communicator& world = dist::world();
  const int64_t tp = f.integer("tensor-parallel-size", 1), pp = f.integer("pipeline-parallel-size", 1);
  if (tp < 1) fail("--tensor-parallel-size must be at least 1, got ", tp);
  if (pp < 1) fail("--pipeline-parallel-size must be at least 1, got ", pp);
  const int64_t ranks = tp * pp;
  const char* flag = pp > 1 && tp > 1 ? "--tensor-parallel-size x --pipeline-parallel-size"
                     : pp > 1         ? "--pipeline-parallel-size"
                                      : "--tensor-parallel-size";
  if (ranks > 1 && world.size() == 1) {
    if (!dist::mpi_available())
      fail(flag, " ", ranks, " needs MPI, and this zen was built without it (install libopenmpi-dev and rebuild)");
    fail(flag, " ", ranks, " needs ", ranks, " MPI ranks: launch with mpirun -np ", ranks, " zen ...");
  }
  if (ranks != world.size())
    fail("mpirun started ", world.size(), " ranks but --tensor-parallel-size x --pipeline-parallel-size is ", ranks,
         " (the two must be equal)");
  if (f.flag("enable-expert-parallel") && tp == 1)
    fail("--enable-expert-parallel splits experts over the ranks of --tensor-parallel-size (> 1)");
  if (ranks == 1) return;
  load.tensor_parallel.comm = &world;
  load.tensor_parallel.pipeline_stages = static_cast<int>(pp);
  load.tensor_parallel.expert_parallel = f.flag("enable-expert-parallel");
  stage_comm_slot() = dist::split_stages(load.tensor_parallel);
  load.tensor_parallel.stage_comm = stage_comm_slot().get();
  if (load.n_threads == 0) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int bound = allowed_cores();
    load.n_threads = bound > 0 && bound < hw ? bound : std::max(1, hw / dist::local_ranks());
  }
  if (world.rank() == 0)
    std::fprintf(stderr, "%s: %d ranks, %d threads each\n", layout_name(load.tensor_parallel).c_str(), world.size(),
                 load.n_threads);
}

bool serve_as_worker(Model& model, const LoadOptions& load) {
  if (!load.tensor_parallel.active() || load.tensor_parallel.world_rank() == 0) return false;
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
  dist::Stats s = load.tensor_parallel.comm->stats();
  if (const dist::Communicator* stage = load.tensor_parallel.stage_comm; stage != nullptr)
    for (size_t op = 0; op < s.ops.size(); ++op) {  // a grid's tensor-parallel collectives
      s.ops[op].calls += stage->stats().ops[op].calls;
      s.ops[op].bytes += stage->stats().ops[op].bytes;
      s.ops[op].seconds += stage->stats().ops[op].seconds;
    }
  const int64_t steps = s[dist::Op::Broadcast].calls;  // one step body per forward
  if (steps == 0) return "";
  std::string out = layout_name(load.tensor_parallel) + " (rank 0): " + std::to_string(steps) + " forwards;";
  for (dist::Op op : {dist::Op::AllReduce, dist::Op::AllGather, dist::Op::Send, dist::Op::Recv}) {
    if (s[op].calls == 0) continue;
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
