#include "base/thread_pool.h"

#include <algorithm>

namespace zen {

void split_range(int64_t n, int parts, int part, int64_t grain, int64_t* begin, int64_t* end) {
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per = units / parts;
  const int64_t extra = units % parts;
  const int64_t b = part * per + std::min<int64_t>(part, extra);
  const int64_t e = b + per + (part < extra ? 1 : 0);
  *begin = std::min(n, b * grain);
  *end = std::min(n, e * grain);
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_grain_ = grain;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    ++generation_;
  }
  cv_.notify_all();
  int64_t b, e;
  split_range(n, n_threads_, 0, grain, &b, &e);
  if (b < e) fn(b, e, 0);
  // Spin briefly: decode steps are short and a sleep/wake costs more than the work.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin > 4096) std::this_thread::yield();
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)>* job;
    int64_t n, grain;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      grain = job_grain_;
    }
    int64_t b, e;
    split_range(n, n_threads_, index, grain, &b, &e);
    if (b < e) (*job)(b, e, index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace zen
