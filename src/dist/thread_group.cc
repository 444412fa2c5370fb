#include "dist/thread_group.h"

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

#include "base/error.h"

namespace zen::dist {

struct ThreadGroup::Shared {
  explicit Shared(int n) : sync(n), slots(static_cast<size_t>(n)), mail(static_cast<size_t>(n * n)) {}
  std::barrier<> sync;
  std::vector<const void*> slots;  // each rank's buffer for the collective in progress
  // Point to point: messages from src to dst wait in mail[src * n + dst], in order.
  std::mutex mail_lock;
  std::condition_variable mail_arrived;
  std::vector<std::deque<std::vector<uint8_t>>> mail;
  // split(): the parts being made, by their first member's rank.
  std::mutex parts_lock;
  std::map<int, std::shared_ptr<Shared>> parts;
};

namespace {

class Member final : public Communicator {
 public:
  // keep: the shared state of a group made by split(), which its members own together.
  Member(ThreadGroup::Shared& s, int rank, int size, std::shared_ptr<ThreadGroup::Shared> keep = nullptr)
      : keep_(std::move(keep)), s_(s), rank_(rank), size_(size) {}
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

  void send(const void* data, size_t bytes, int dest) override {
    ZEN_CHECK(dest >= 0 && dest < size_ && dest != rank_, "send to rank ", dest);
    const auto* p = static_cast<const uint8_t*>(data);
    {
      std::lock_guard<std::mutex> lock(s_.mail_lock);
      s_.mail[static_cast<size_t>(rank_ * size_ + dest)].emplace_back(p, p + bytes);
    }
    s_.mail_arrived.notify_all();
    count(Op::Send, bytes);
  }

  void recv(void* data, size_t bytes, int src) override {
    ZEN_CHECK(src >= 0 && src < size_ && src != rank_, "receive from rank ", src);
    std::unique_lock<std::mutex> lock(s_.mail_lock);
    auto& box = s_.mail[static_cast<size_t>(src * size_ + rank_)];
    s_.mail_arrived.wait(lock, [&] { return !box.empty(); });
    const std::vector<uint8_t> m = std::move(box.front());
    box.pop_front();
    lock.unlock();
    ZEN_CHECK(m.size() == bytes, "rank ", rank_, " expected ", bytes, " bytes from rank ", src, ", got ", m.size());
    if (bytes > 0) std::memcpy(data, m.data(), bytes);
    count(Op::Recv, bytes);
  }

  [[noreturn]] void abort(const std::string& why) override { fail("rank ", rank_, ": ", why); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    const std::pair<int, int> mine{color, key};
    post(&mine);
    std::vector<std::pair<int, int>> part;  // (key, rank) of this color's members
    for (int r = 0; r < size_; ++r) {
      const auto& theirs = *static_cast<const std::pair<int, int>*>(s_.slots[static_cast<size_t>(r)]);
      if (theirs.first == color) part.emplace_back(theirs.second, r);
    }
    std::sort(part.begin(), part.end());
    const int first = part.front().second;
    const auto at = std::find(part.begin(), part.end(), std::make_pair(key, rank_)) - part.begin();
    if (rank_ == first) {
      std::lock_guard<std::mutex> lock(s_.parts_lock);
      s_.parts[first] = std::make_shared<ThreadGroup::Shared>(static_cast<int>(part.size()));
    }
    s_.sync.arrive_and_wait();  // every part exists; every (color, key) has been read
    std::shared_ptr<ThreadGroup::Shared> shared;
    {
      std::lock_guard<std::mutex> lock(s_.parts_lock);
      shared = s_.parts[first];
    }
    s_.sync.arrive_and_wait();  // every member holds its part: the map may be reused
    if (rank_ == first) {
      std::lock_guard<std::mutex> lock(s_.parts_lock);
      s_.parts.erase(first);
    }
    ThreadGroup::Shared& s = *shared;
    return std::make_unique<Member>(s, static_cast<int>(at), static_cast<int>(part.size()), std::move(shared));
  }

 private:
  void post(const void* buffer) {
    s_.slots[static_cast<size_t>(rank_)] = buffer;
    s_.sync.arrive_and_wait();  // every rank's buffer is posted
  }
  void count(Op op, size_t bytes) {
    ++stats_[op].calls;
    stats_[op].bytes += static_cast<double>(bytes);
  }
  std::shared_ptr<ThreadGroup::Shared> keep_;
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
