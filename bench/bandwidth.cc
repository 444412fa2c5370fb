// Memory-bandwidth probe: streaming read of a large float buffer (default 1 GiB), summed by 1..N
// threads, best of 5 runs. Decode speed of an LLM is bounded by how fast the weights stream from
// DRAM, so this is the roofline that bench/vs_llamacpp.py compares decode speed against.
//
//   zen_bandwidth [--mib 1024] [--threads 2] [--reps 5]
// prints one line per thread count:  read_bandwidth threads=T gbps=X.XX
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  size_t mib = 1024;
  int max_threads = 2;
  int reps = 5;
};

// Eight independent accumulators so the adds never wait on each other: the loop is bound by
// the loads alone.
__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(p + i + 8 * k));
  }
  for (int k = 1; k < 8; ++k) acc[0] = _mm256_add_ps(acc[0], acc[k]);
  float lanes[8];
  _mm256_storeu_ps(lanes, acc[0]);
  float total = 0;
  for (float v : lanes) total += v;
  for (; i < n; ++i) total += p[i];
  return total;
}

float sum_plain(const float* p, size_t n) {
  float acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int k = 0; k < 16; ++k) acc[k] += p[i + k];
  }
  float total = 0;
  for (float v : acc) total += v;
  for (; i < n; ++i) total += p[i];
  return total;
}

float sum_floats(const float* p, size_t n) {
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  return has_avx2 ? sum_avx2(p, n) : sum_plain(p, n);
}

// Runs fn(t) on threads 0..n-1 (t = 0 on the calling thread) and waits for all.
template <typename Fn>
void run_parallel(int n, Fn fn) {
  std::vector<std::thread> workers;
  for (int t = 1; t < n; ++t) workers.emplace_back(fn, t);
  fn(0);
  for (auto& w : workers) w.join();
}

// GB/s of one pass over the buffer split into `threads` contiguous slices.
double one_pass(const float* data, size_t n, int threads, float* sink) {
  std::vector<float> partial(threads);
  const size_t slice = n / threads;
  const auto start = std::chrono::steady_clock::now();
  run_parallel(threads, [&](int t) {
    const size_t begin = t * slice;
    const size_t end = t == threads - 1 ? n : begin + slice;
    partial[t] = sum_floats(data + begin, end - begin);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (float v : partial) *sink += v;
  return static_cast<double>(n * sizeof(float)) / seconds / 1e9;
}

bool parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const long value = std::strtol(argv[++i], nullptr, 10);
    if (value <= 0) return false;
    if (flag == "--mib") o.mib = static_cast<size_t>(value);
    else if (flag == "--threads") o.max_threads = static_cast<int>(value);
    else if (flag == "--reps") o.reps = static_cast<int>(value);
    else return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, o)) {
    std::fprintf(stderr, "usage: zen_bandwidth [--mib 1024] [--threads 2] [--reps 5]\n");
    return 2;
  }
  const size_t n = o.mib * 1024 * 1024 / sizeof(float);
  std::unique_ptr<float[]> data(new float[n]);
  // Touch every page with the thread layout used below, so page faults are not timed.
  run_parallel(o.max_threads, [&](int t) {
    const size_t slice = n / o.max_threads;
    const size_t begin = t * slice;
    const size_t end = t == o.max_threads - 1 ? n : begin + slice;
    std::fill(data.get() + begin, data.get() + end, 1.0f);
  });
  float sink = 0;
  for (int threads = 1; threads <= o.max_threads; ++threads) {
    double best = 0;
    for (int r = 0; r < o.reps; ++r) best = std::max(best, one_pass(data.get(), n, threads, &sink));
    std::printf("read_bandwidth threads=%d gbps=%.2f\n", threads, best);
  }
  // Keep the sums observable so the reads cannot be optimized away.
  if (sink == -1.0f) std::printf("%f\n", static_cast<double>(sink));
  return 0;
}
