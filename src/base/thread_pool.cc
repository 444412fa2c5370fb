#include "base/thread_pool.h"

#include <algorithm>
#include <exception>

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
  claimed_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(n_threads_));
  for (int i = 0; i < n_threads_; ++i) claimed_[static_cast<size_t>(i)].store(0);
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

bool ThreadPool::try_run(int slot, uint64_t gen) {
  // Read the job first: it is only used if the claim below succeeds, and a successful claim
  // for `gen` proves job `gen` was still live (the caller cannot publish the next job before
  // every slot of this one is claimed and done), so what was read belongs to it.
  const Fn* fn = job_.load(std::memory_order_acquire);
  const int64_t n = job_n_.load(std::memory_order_relaxed);
  const int64_t grain = job_grain_.load(std::memory_order_relaxed);
  std::atomic<uint64_t>& claim = claimed_[static_cast<size_t>(slot)];
  uint64_t old = claim.load(std::memory_order_acquire);
  if (old >= gen || !claim.compare_exchange_strong(old, gen, std::memory_order_acq_rel)) return false;
  int64_t b, e;
  split_range(n, n_threads_, slot, grain, &b, &e);
  if (b < e) (*fn)(b, e, slot);
  done_.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

void ThreadPool::parallel_for(int64_t n, const Fn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  job_.store(&fn, std::memory_order_relaxed);
  job_n_.store(n, std::memory_order_relaxed);
  job_grain_.store(grain, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  uint64_t gen;
  {
    // Published under the mutex so a worker about to sleep cannot miss it; the release
    // orders the job fields before it.
    std::lock_guard<std::mutex> lock(mu_);
    gen = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  if (sleeping_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  int64_t b, e;
  split_range(n, n_threads_, 0, grain, &b, &e);
  if (b < e) fn(b, e, 0);
  // Take over the slots whose workers have not started (busy machine, sleeping worker).
  for (int slot = 1; slot < n_threads_; ++slot) try_run(slot, gen);
  for (int spins = 0; done_.load(std::memory_order_acquire) != n_threads_ - 1; ++spins) {
    if (spins < 2000) ZEN_CPU_RELAX();
    else std::this_thread::yield();
  }
}

void ThreadPool::parallel_chunks(int64_t n, const Fn& fn, int64_t chunk) {
  if (n <= 0) return;
  chunk = std::clamp<int64_t>(chunk, 1, n);
  const int64_t n_chunks = n / chunk + (n % chunk != 0 ? 1 : 0);
  const auto run_chunk = [&](int64_t c, int slot) { fn(c * chunk, c == n_chunks - 1 ? n : (c + 1) * chunk, slot); };
  if (n_threads_ == 1 || n_chunks == 1) {
    for (int64_t c = 0; c < n_chunks; ++c) run_chunk(c, 0);
    return;
  }
  // Reset before parallel_for publishes the job (its release orders this store before any
  // worker's claim); every claimer of the previous job has finished by now.
  next_chunk_.store(0, std::memory_order_relaxed);
  // One item per slot: each slot's runner claims chunks until none is left. A throwing chunk
  // stops the handing out; the first exception is rethrown once every runner has returned
  // (a runner must not throw, or parallel_for would return while others still run).
  std::mutex error_mu;
  std::exception_ptr error;
  parallel_for(n_threads_, [&](int64_t, int64_t, int slot) {
    for (int64_t c; (c = next_chunk_.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) {
      try {
        run_chunk(c, slot);
      } catch (...) {
        next_chunk_.store(n_chunks, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        return;
      }
    }
  });
  if (error) std::rethrow_exception(error);
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
    try_run(index, seen);
  }
}

}  // namespace zen
