// Persistent thread pool: workers spin briefly on a generation counter, then sleep; a decode
// step issues hundreds of small parallel jobs, so a futex wake per job would dominate.
// parallel_for splits [0, n) into one contiguous range per thread; each range is claimed
// exactly once, by its worker or, when that worker is late (descheduled on a busy machine),
// by the calling thread. The ranges never change, so each output element is computed by one
// call in one fixed order whoever runs it (batch-invariant kernels rely on that).
// parallel_chunks hands out smaller chunks as threads come free, for work whose items do
// not depend on how the range is cut (a matmul's row groups, attention's heads and tiles).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zen {

class ThreadPool {
 public:
  using Fn = std::function<void(int64_t, int64_t, int)>;
  explicit ThreadPool(int n_threads);  // n_threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(begin, end, slot) over disjoint ranges covering [0, n); slot identifies the
  // range (0 .. size()-1), so per-slot scratch is never shared. The calling thread takes
  // part. Ranges are aligned to `grain` items. Not reentrant.
  void parallel_for(int64_t n, const Fn& fn, int64_t grain = 1);
  // Calls fn(begin, end, slot) over [0, n) cut into chunks of `chunk` items, handed out in
  // order to whichever thread comes free, so a slower or descheduled thread does less of the
  // work (on a shared 2-core VM one thread often runs 5-10% slower than the other, and a
  // static split waits for it). fn runs once per chunk (also on a 1-thread pool), a slot
  // running any number of them one after another; which slot runs a chunk varies, so use it
  // only where an item's result does not depend on that. If fn throws, no further chunk
  // starts and the first exception is rethrown after the running ones end. Not reentrant.
  void parallel_chunks(int64_t n, const Fn& fn, int64_t chunk);

 private:
  void worker(int index);
  // Runs range `slot` of job `gen` if nobody has claimed it yet; true if this call ran it.
  bool try_run(int slot, uint64_t gen);
  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  // The job: written by the caller before publishing `generation_` (atomics, so a late
  // worker reading them while the next job is written is not a data race; it then fails
  // to claim and discards what it read).
  std::atomic<const Fn*> job_{nullptr};
  std::atomic<int64_t> job_n_{0};
  std::atomic<int64_t> job_grain_{1};
  std::unique_ptr<std::atomic<uint64_t>[]> claimed_;  // per slot: last generation claimed
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> done_{0};  // slots 1.. finished in the current job
  std::atomic<int64_t> next_chunk_{0};  // parallel_chunks: the next chunk to hand out
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

// Splits [0, n) into `parts` contiguous ranges aligned to grain; returns range `part`.
void split_range(int64_t n, int parts, int part, int64_t grain, int64_t* begin, int64_t* end);

}  // namespace zen
