#include "dist/thread_group.h"

#include <cstring>

#include "base/error.h"

namespace zen::dist {

struct ThreadGroup::Shared {
  explicit Shared(int n) : sync(n), slots(static_cast<size_t>(n)) {}
  std::barrier<> sync;
  std::vector<const void*> slots;  // each rank's buffer for the collective in progress
};

namespace {

class Member final : public Communicator {
 public:
  Member(ThreadGroup::Shared& s, int rank, int size) : s_(s), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void broadcast(void* data, size_t bytes, int root) override {
    post(data);
    if (rank_ != root && bytes > 0) std::memcpy(data, s_.slots[static_cast<size_t>(root)], bytes);
    s_.sync.arrive_and_wait();  // root's buffer is free again
    count(Op::Broadcast, bytes);
  }
  void broadcast_idle(void* data, size_t bytes, int root) override { broadcast(data, bytes, root); }

  void all_reduce_sum(float* data, size_t n) override {
    post(data);
    sum_.assign(n, 0.0f);
    for (size_t r = 0; r < static_cast<size_t>(size_); ++r) {
      const auto* v = static_cast<const float*>(s_.slots[r]);
      for (size_t i = 0; i < n; ++i) sum_[i] += v[i];
    }
    s_.sync.arrive_and_wait();  // everyone has read every buffer
    std::memcpy(data, sum_.data(), n * sizeof(float));
    count(Op::AllReduce, n * sizeof(float));
  }

  void all_gather(const void* send, size_t bytes, void* recv) override {
    post(send);
    for (size_t r = 0; r < static_cast<size_t>(size_); ++r)
      if (bytes > 0) std::memcpy(static_cast<char*>(recv) + r * bytes, s_.slots[r], bytes);
    s_.sync.arrive_and_wait();
    count(Op::AllGather, bytes);
  }

  [[noreturn]] void abort(const std::string& why) override { fail("rank ", rank_, ": ", why); }

 private:
  void post(const void* buffer) {
    s_.slots[static_cast<size_t>(rank_)] = buffer;
    s_.sync.arrive_and_wait();  // every rank's buffer is posted
  }
  void count(Op op, size_t bytes) {
    ++stats_[op].calls;
    stats_[op].bytes += static_cast<double>(bytes);
  }
  ThreadGroup::Shared& s_;
  int rank_, size_;
  std::vector<float> sum_;
};

}  // namespace

ThreadGroup::ThreadGroup(int size) : shared_(std::make_unique<Shared>(size)) {
  ZEN_CHECK(size >= 1, "thread group of ", size);
  for (int r = 0; r < size; ++r) members_.push_back(std::make_unique<Member>(*shared_, r, size));
}

ThreadGroup::~ThreadGroup() = default;

}  // namespace zen::dist
