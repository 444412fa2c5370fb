// FP8 / NVFP4 GEMV benchmarks in GB/s of weight bytes streamed (codes + scales), registered
// into zen_kernels_bench:
//   zen_kernels_bench --benchmark_filter='Gemv/(FP8|NVFP4)'
// and prefill-shaped products in FLOP/s: --benchmark_filter='Gemm64/(FP8|NVFP4)'.
// dram:1 rotates over enough copies (> 128 MiB) that each call streams from DRAM, as decode
// does; dram:0 keeps one L3-resident copy (the kernel's compute ceiling).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/kernels_test_util.h"
#include "kernels/cpu/nvfp4.h"
#include "kernels/cpu/packed.h"
#include "kernels/cpu/quant.h"

namespace zen::kernels {
namespace {

constexpr size_t kStreamBytes = size_t{160} << 20;

ThreadPool& fp_pool(int threads) {
  static ThreadPool one(1), two(2);
  return threads == 1 ? one : two;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, uint8_t lo, uint8_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(d(rng));
  return v;
}

size_t copies_for(size_t bytes, bool dram) { return dram ? (kStreamBytes + bytes - 1) / bytes : 1; }

// Args: n, k, threads, simd, dram, block (0: per-tensor scale, else block x block tiles).
void BM_GemvFp8(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), block = state.range(5);
  set_simd_enabled(state.range(3) != 0);
  const size_t bytes = static_cast<size_t>(n * k);
  const std::vector<uint8_t> w = random_bytes(bytes, 1, 0x00, 0x7E);
  std::vector<std::vector<uint8_t>> copies(copies_for(bytes, state.range(4) != 0), w);
  const int64_t br = block == 0 ? n : block, bc = block == 0 ? k : block;
  std::vector<float> scales(static_cast<size_t>(((n + br - 1) / br) * ((k + bc - 1) / bc)), 0.01f);
  std::mt19937 rng(2);
  const auto x = testing::random_activations(rng, k);
  std::vector<float> y(static_cast<size_t>(n));
  size_t i = 0;
  for (auto _ : state) {
    const Fp8Matrix m{copies[i].data(), n, k, scales.data(), br, bc};
    fp8_matmul(m, x.data(), 1, y.data(), fp_pool(static_cast<int>(state.range(2))));
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % copies.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  set_simd_enabled(true);
}

// Args: n, k, threads, simd, dram.
void BM_GemvNvfp4(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1);
  set_simd_enabled(state.range(3) != 0);
  const size_t code_bytes = static_cast<size_t>(n * k / 2), scale_bytes = static_cast<size_t>(n * k / 16);
  std::vector<uint8_t> both = random_bytes(code_bytes, 3, 0, 255);
  const std::vector<uint8_t> scales = random_bytes(scale_bytes, 4, 0x20, 0x50);
  both.insert(both.end(), scales.begin(), scales.end());
  std::vector<std::vector<uint8_t>> copies(copies_for(both.size(), state.range(4) != 0), both);
  std::mt19937 rng(5);
  const auto x = testing::random_activations(rng, k);
  std::vector<float> y(static_cast<size_t>(n));
  size_t i = 0;
  for (auto _ : state) {
    const Nvfp4Matrix m{copies[i].data(), copies[i].data() + code_bytes, n, k, 0.01f};
    nvfp4_matmul(m, x.data(), 1, y.data(), fp_pool(static_cast<int>(state.range(2))));
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % copies.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * both.size()));
  set_simd_enabled(true);
}

// Prefill-shaped products: FLOP/s at `tokens` tokens (weights L3/L2-resident).
// Args: n, k, threads, tokens, block (FP8: 0 per-tensor, else block x block; NVFP4: unused).
void BM_GemmFp8(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), tokens = state.range(3), block = state.range(4);
  const std::vector<uint8_t> w = random_bytes(static_cast<size_t>(n * k), 1, 0x00, 0x7E);
  const int64_t br = block == 0 ? n : block, bc = block == 0 ? k : block;
  std::vector<float> scales(static_cast<size_t>(((n + br - 1) / br) * ((k + bc - 1) / bc)), 0.01f);
  std::mt19937 rng(2);
  const auto x = testing::random_activations(rng, tokens * k);
  std::vector<float> y(static_cast<size_t>(n * tokens));
  const Fp8Matrix m{w.data(), n, k, scales.data(), br, bc};
  for (auto _ : state) {
    fp8_matmul(m, x.data(), tokens, y.data(), fp_pool(static_cast<int>(state.range(2))));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(2 * n * k * tokens),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemmNvfp4(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), tokens = state.range(3);
  const std::vector<uint8_t> codes = random_bytes(static_cast<size_t>(n * k / 2), 3, 0, 255);
  const std::vector<uint8_t> scales = random_bytes(static_cast<size_t>(n * k / 16), 4, 0x20, 0x50);
  std::mt19937 rng(5);
  const auto x = testing::random_activations(rng, tokens * k);
  std::vector<float> y(static_cast<size_t>(n * tokens));
  const Nvfp4Matrix m{codes.data(), scales.data(), n, k, 0.01f};
  for (auto _ : state) {
    nvfp4_matmul(m, x.data(), tokens, y.data(), fp_pool(static_cast<int>(state.range(2))));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(2 * n * k * tokens),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// NVFP4 through the row-interleaved integer kernels (packed.h; the default on AVX2).
// Args: n, k, threads, tokens, dram.
void BM_PackedNvfp4(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), tokens = state.range(3);
  const size_t code_bytes = static_cast<size_t>(n * k / 2);
  std::vector<uint8_t> both = random_bytes(code_bytes, 3, 0, 255);
  const std::vector<uint8_t> scales = random_bytes(static_cast<size_t>(n * k / 16), 4, 0x20, 0x50);
  both.insert(both.end(), scales.begin(), scales.end());
  std::vector<PackedMatrix> packed;
  for (size_t c = 0; c < copies_for(both.size(), state.range(4) != 0); ++c)
    packed.push_back(PackedMatrix::pack_nvfp4({both.data(), both.data() + code_bytes, n, k, 0.01f}, "w"));
  std::mt19937 rng(5);
  const auto x = testing::random_activations(rng, tokens * k);
  std::vector<float> y(static_cast<size_t>(n * tokens));
  size_t i = 0;
  for (auto _ : state) {
    packed[i].matmul(x.data(), tokens, y.data(), fp_pool(static_cast<int>(state.range(2))));
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % packed.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * both.size()));
  state.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(2 * n * k * tokens),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void gemm_args(benchmark::internal::Benchmark* b, bool with_block) {
  for (int threads : {1, 2})
    for (int64_t block : with_block ? std::vector<int64_t>{0, 128} : std::vector<int64_t>{0})
      for (const auto& [n, k] : {std::pair<int64_t, int64_t>{3072, 1024}, {2048, 6144}})  // 0.6B up, 1.7B down
        b->Args({n, k, threads, 64, block});
  b->ArgNames({"n", "k", "threads", "tokens", "block"});
  b->UseRealTime();
}

// Qwen2.5-0.5B's ffn_up shape [4864, 896], as in kernels_bench.cc.
void fp_args(benchmark::internal::Benchmark* b, bool with_block) {
  for (int64_t block : with_block ? std::vector<int64_t>{0, 128} : std::vector<int64_t>{0})
    for (int simd : {1, 0})
      for (int threads : {1, 2})
        for (int dram : {1, 0}) {
          if (with_block) b->Args({4864, 896, threads, simd, dram, block});
          else b->Args({4864, 896, threads, simd, dram});
        }
  b->ArgNames(with_block ? std::vector<std::string>{"n", "k", "threads", "simd", "dram", "block"}
                         : std::vector<std::string>{"n", "k", "threads", "simd", "dram"});
  b->UseRealTime();
}

BENCHMARK(BM_GemvFp8)->Name("Gemv/FP8")->Apply([](benchmark::internal::Benchmark* b) { fp_args(b, true); });
BENCHMARK(BM_GemvNvfp4)->Name("Gemv/NVFP4")->Apply([](benchmark::internal::Benchmark* b) { fp_args(b, false); });
// Qwen3-0.6B's ffn_up shape [3072, 1024].
BENCHMARK(BM_GemmFp8)->Name("Gemm64/FP8")->Apply([](benchmark::internal::Benchmark* b) { gemm_args(b, true); });
BENCHMARK(BM_GemmNvfp4)->Name("Gemm64/NVFP4")->Apply([](benchmark::internal::Benchmark* b) { gemm_args(b, false); });
// The packed NVFP4 kernels at the shapes of kernels_bench.cc's Packed/ cases ([4864, 896]; decode
// from DRAM) and of Gemm64/NVFP4 above ([3072, 1024]).
BENCHMARK(BM_PackedNvfp4)->Name("Packed/NVFP4")->Apply([](benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {1, 16, 64})
    for (int threads : {1, 2}) {
      b->Args({4864, 896, threads, tokens, tokens == 1 ? 1 : 0});
      if (tokens == 64) b->Args({3072, 1024, threads, tokens, 0});
    }
  b->ArgNames({"n", "k", "threads", "tokens", "dram"});
  b->UseRealTime();
});

}  // namespace
}  // namespace zen::kernels
