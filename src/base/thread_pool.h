// Persistent thread pool: workers spin briefly on a generation counter, then sleep; a decode
// step issues hundreds of small parallel jobs, so a futex wake per job would dominate.
// parallel_for splits [0, n) into one contiguous range per thread, so each output element
// is computed by one thread in one fixed order (batch-invariant kernels rely on that).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zen {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(begin, end, thread_index) over disjoint ranges covering [0, n). The calling
  // thread takes part. Ranges are aligned to `grain` items. Not reentrant.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1);

 private:
  void worker(int index);
  void run_share(int index);
  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

// Splits [0, n) into `parts` contiguous ranges aligned to grain; returns range `part`.
void split_range(int64_t n, int parts, int part, int64_t grain, int64_t* begin, int64_t* end);

}  // namespace zen
