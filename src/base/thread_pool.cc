#include "base/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZEN_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define ZEN_CPU_RELAX() asm volatile("yield")
#else
#define ZEN_CPU_RELAX() ((void)0)
#endif

namespace zen {
namespace {
// Iterations a worker spins before sleeping (~100 us): longer than the gap between two
// matmuls of one decode step, much shorter than the gap between requests.
constexpr int kSpinIterations = 20000;
}  // namespace

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
    stop_.store(true);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_share(int index) {
  int64_t b, e;
  split_range(job_n_, n_threads_, index, job_grain_, &b, &e);
  if (b < e) (*job_)(b, e, index);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // The generation bump is ordered after the job fields (release), and taken under the
    // mutex so a worker about to sleep cannot miss it.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleeping_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  run_share(0);
  // Spin, then yield: on an oversubscribed machine the worker may need this core.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 2000) ZEN_CPU_RELAX();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed)) {
      if (++spins < kSpinIterations) {
        ZEN_CPU_RELAX();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_.fetch_add(1, std::memory_order_acq_rel);
      cv_.wait(lock, [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; });
      sleeping_.fetch_sub(1, std::memory_order_acq_rel);
      break;
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_share(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace zen
