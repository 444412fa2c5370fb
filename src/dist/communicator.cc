#include "dist/communicator.h"

#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "dist/mpi_communicator.h"

namespace zen::dist {
namespace {

class Single final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void broadcast(void*, size_t, int) override {}
  void broadcast_idle(void*, size_t, int) override {}
  void all_reduce_sum(float*, size_t) override {}
  void all_gather(const void* send, size_t bytes, void* recv) override {
    if (bytes > 0) std::memmove(recv, send, bytes);
  }
  void send(const void*, size_t, int dest) override { fail("send to rank ", dest, " in a job of one process"); }
  void recv(void*, size_t, int src) override { fail("receive from rank ", src, " in a job of one process"); }
  [[noreturn]] void abort(const std::string& why) override { fail(why); }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<Single>(); }
};

std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> w = make_single();
  return w;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : 0;
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::Broadcast: return "broadcast";
    case Op::AllReduce: return "all-reduce";
    case Op::AllGather: return "all-gather";
    case Op::Send: return "send";
    case Op::Recv: return "recv";
    case Op::kCount: break;
  }
  return "?";
}

double Stats::seconds() const {
  double s = 0;
  for (const OpStats& o : ops) s += o.seconds;
  return s;
}

std::unique_ptr<Communicator> make_single() { return std::make_unique<Single>(); }

bool launched_by_mpi_launcher() {
  return env_int("OMPI_COMM_WORLD_SIZE") > 0 || env_int("PMI_SIZE") > 0 || std::getenv("PMIX_RANK") != nullptr;
}

bool mpi_available() { return mpi::available(); }

Communicator& world() { return *world_slot(); }

int local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const int n = env_int(name); n > 0) return n;
  return 1;
}

Session::Session(int* argc, char*** argv) {
  if (!launched_by_mpi_launcher()) return;
  if (!mpi::available())
    fail("this process was started by an MPI launcher, but this zen was built without MPI "
         "(install libopenmpi-dev and rebuild: cmake finds it)");
  // MPI starts threads of its own; they must not take SIGINT / SIGTERM (the default action
  // would end the rank before zen serve's own handling shuts it down cleanly), so they are
  // started with both blocked, and this thread's mask is restored after.
  sigset_t stop, before;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, &before);
  world_slot() = mpi::init_world(argc, argv);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

Session::~Session() {
  if (world().size() > 1 || mpi::initialized()) {
    world_slot() = make_single();
    mpi::finalize();
  }
}

void Session::fail_job(int exit_code) {
  if (world().size() > 1) mpi::abort_world(exit_code);
}

}  // namespace zen::dist
