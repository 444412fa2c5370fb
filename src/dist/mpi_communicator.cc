#include "dist/mpi_communicator.h"

#include "base/error.h"

#ifdef ZEN_HAVE_MPI
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

namespace zen::dist::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// Large messages go in pieces: MPI counts are int.
constexpr size_t kMaxChunk = size_t{1} << 30;
constexpr int kTag = 1;  // point-to-point messages (pipeline stages)

// The job's ranks (MPI_COMM_WORLD), or a part of them made by split().
class MpiComm final : public Communicator {
 public:
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override {
    if (comm_ != MPI_COMM_WORLD && initialized()) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void broadcast(void* data, size_t bytes, int root) override {
    const auto t0 = Clock::now();
    auto* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += kMaxChunk)
      MPI_Bcast(p + off, static_cast<int>(std::min(kMaxChunk, bytes - off)), MPI_BYTE, root, comm_);
    note(Op::Broadcast, bytes, t0);
  }

  void broadcast_idle(void* data, size_t bytes, int root) override {
    ZEN_CHECK(bytes <= kMaxChunk, "broadcast_idle of ", bytes, " bytes");
    MPI_Request request;
    MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &request);
    // Spin briefly (the next step usually follows at once), then sleep, backing off to 1 ms.
    int done = 0;
    auto nap = std::chrono::microseconds(0);
    while (MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done) {
      if (nap.count() > 0) std::this_thread::sleep_for(nap);
      nap = std::min(std::chrono::microseconds(1000), nap + std::chrono::microseconds(nap.count() < 50 ? 1 : 50));
    }
  }

  void all_reduce_sum(float* data, size_t n) override {
    const auto t0 = Clock::now();
    for (size_t off = 0; off < n; off += kMaxChunk / sizeof(float))
      MPI_Allreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(kMaxChunk / sizeof(float), n - off)),
                    MPI_FLOAT, MPI_SUM, comm_);
    note(Op::AllReduce, n * sizeof(float), t0);
  }

  void all_gather(const void* send, size_t bytes, void* recv) override {
    ZEN_CHECK(bytes <= INT_MAX, "all_gather of ", bytes, " bytes per rank");
    const auto t0 = Clock::now();
    MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, comm_);
    note(Op::AllGather, bytes, t0);
  }

  void send(const void* data, size_t bytes, int dest) override {
    const auto t0 = Clock::now();
    const auto* p = static_cast<const char*>(data);
    for (size_t off = 0; off < bytes || off == 0; off += kMaxChunk) {
      MPI_Send(p + off, static_cast<int>(std::min(kMaxChunk, bytes - off)), MPI_BYTE, dest, kTag, comm_);
      if (bytes == 0) break;
    }
    note(Op::Send, bytes, t0);
  }

  void recv(void* data, size_t bytes, int src) override {
    const auto t0 = Clock::now();
    auto* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes || off == 0; off += kMaxChunk) {
      const int want = static_cast<int>(std::min(kMaxChunk, bytes - off));
      MPI_Status status;
      MPI_Recv(p + off, want, MPI_BYTE, src, kTag, comm_, &status);
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      ZEN_CHECK(got == want, "rank ", rank_, " expected ", want, " bytes from rank ", src, ", got ", got);
      if (bytes == 0) break;
    }
    note(Op::Recv, bytes, t0);
  }

  [[noreturn]] void abort(const std::string& why) override {
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    std::fprintf(stderr, "zen rank %d: %s\n", world_rank, why.c_str());
    std::fflush(stderr);
    abort_world(1);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part;
    MPI_Comm_split(comm_, color, key, &part);
    return std::make_unique<MpiComm>(part);
  }

 private:
  void note(Op op, size_t bytes, Clock::time_point t0) {
    OpStats& s = stats_[op];
    ++s.calls;
    s.bytes += static_cast<double>(bytes);
    s.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool available() { return true; }

bool initialized() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

std::unique_ptr<Communicator> init_world(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    fail("this MPI library does not support MPI_THREAD_SERIALIZED (the server's engine thread runs the forward)");
  }
  return std::make_unique<MpiComm>(MPI_COMM_WORLD);
}

void finalize() {
  if (initialized()) MPI_Finalize();
}

void abort_world(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace zen::dist::mpi

#else  // no MPI in this build

#include <cstdlib>

namespace zen::dist::mpi {
bool available() { return false; }
bool initialized() { return false; }
std::unique_ptr<Communicator> init_world(int*, char***) { fail("this zen was built without MPI"); }
void finalize() {}
void abort_world(int exit_code) { std::_Exit(exit_code); }
}  // namespace zen::dist::mpi

#endif
