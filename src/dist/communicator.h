// The processes that run one model together (tensor parallelism over MPI, issue 22). Nothing
// outside src/dist includes <mpi.h>: the model sees this interface, the CLI calls init().
//
// One process is a communicator of size 1 whose collectives are copies; that is what every
// run without mpirun gets, and what a build without MPI always gets. Under `mpirun -np N`
// (and a build with MPI) world() spans the N ranks. A collective that fails is fatal for
// every rank (MPI's default error handler): a rank that dies takes the job down with a
// message from mpirun rather than leaving the others waiting.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zen::dist {

enum class Op : uint8_t { Broadcast, AllReduce, AllGather, Send, Recv, kCount };
const char* op_name(Op op);  // "broadcast", "all-reduce", "all-gather", "send", "recv"

// What the collectives of a communicator did: calls, bytes each rank contributed, and wall
// time inside them (which includes waiting for the slowest rank: the number that scales).
struct OpStats {
  int64_t calls = 0;
  double bytes = 0;
  double seconds = 0;
};
struct Stats {
  std::array<OpStats, static_cast<size_t>(Op::kCount)> ops{};
  OpStats& operator[](Op op) { return ops[static_cast<size_t>(op)]; }
  const OpStats& operator[](Op op) const { return ops[static_cast<size_t>(op)]; }
  double seconds() const;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collectives: every rank calls them in the same order with the same sizes.
  // data[bytes] goes from root to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // The same, for a rank waiting an unknown time for root's next message (a worker between
  // steps): it sleeps between polls instead of spinning a core.
  virtual void broadcast_idle(void* data, size_t bytes, int root) = 0;
  // data[n] <- the element-wise sum over ranks of data[n]; every rank gets the same result.
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // recv[size() * bytes] <- every rank's send[bytes], in rank order.
  virtual void all_gather(const void* send, size_t bytes, void* recv) = 0;
  // Point to point (pipeline stages): data[bytes] to rank dest, which receives it with
  // recv(..., bytes, this rank); messages between two ranks arrive in order.
  virtual void send(const void* data, size_t bytes, int dest) = 0;
  virtual void recv(void* data, size_t bytes, int src) = 0;
  // Ends every rank of the job with this message (never returns).
  [[noreturn]] virtual void abort(const std::string& why) = 0;
  // A collective: the ranks that pass the same color form a new communicator, ranked by
  // (key, rank here) (MPI_Comm_split). Tensor-parallel collectives of one pipeline stage.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  const Stats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  Stats stats_;
};

// A communicator of one process (collectives copy or do nothing).
std::unique_ptr<Communicator> make_single();

// Whether this process was started by mpirun / an MPI launcher (its environment says so).
bool launched_by_mpi_launcher();
// Whether this build can run MPI.
bool mpi_available();

// The job's processes. Before init(), or without a launcher: a communicator of size 1.
Communicator& world();
// Ranks of this job on this host (the launcher's local size; 1 without one).
int local_ranks();

// Initializes MPI when launched by mpirun (a build without MPI then refuses: throws
// zen::Error saying so), and finalizes it when destroyed. One per process, in main().
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // Ends the job on every rank after an error on this one (size > 1), else returns.
  void fail_job(int exit_code);
};

}  // namespace zen::dist
