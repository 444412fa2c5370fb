// Kernel benchmarks: GEMV (decode) in GB/s of weight streamed, GEMM (prefill, T = 64) in
// FLOP/s, per weight format, with 1 and 2 threads, AVX2 and scalar.
//
//   zen_kernels_bench --benchmark_filter=Gemv
//
// GEMV with dram:1 rotates over enough copies of the matrix (> 128 MiB) that every call
// streams its weights from DRAM, as decode does, instead of from the 32 MiB L3; dram:0 keeps
// one copy (L3-resident), which shows the kernel's compute ceiling.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "io/tensor.h"
#include "kernels/cpu/kernels_test_util.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed.h"
#include "kernels/cpu/quant.h"
#include "model/attention.h"

namespace zen::kernels {
namespace {

constexpr size_t kStreamBytes = size_t{160} << 20;

struct Weights {
  std::vector<std::vector<uint8_t>> copies;
  std::vector<TensorView> views;
};

// Copies of one random [n, k] matrix; enough of them to exceed the last-level cache.
Weights make_weights(DType t, int64_t n, int64_t k, size_t min_total_bytes) {
  std::mt19937 rng(1);
  Weights w;
  const auto first = testing::random_weights(rng, t, n, k);
  const size_t count = std::max<size_t>(1, (min_total_bytes + first.size() - 1) / first.size());
  for (size_t i = 0; i < count; ++i) w.copies.push_back(first);
  for (auto& c : w.copies) {
    TensorView v;
    v.name = "w";
    v.dtype = t;
    v.shape = {n, k};
    v.data = c.data();
    v.nbytes = c.size();
    w.views.push_back(v);
  }
  return w;
}

ThreadPool& pool_of(int threads) {
  static ThreadPool one(1), two(2);
  return threads == 1 ? one : two;
}

void set_simd(bool on) { set_simd_enabled(on); }

// Args: n, k, threads, simd, from_dram (0: one copy, so it stays in L3: compute speed).
void BM_Gemv(benchmark::State& state, DType t) {
  const int64_t n = state.range(0), k = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  set_simd(state.range(3) != 0);
  const Weights w = make_weights(t, n, k, state.range(4) != 0 ? kStreamBytes : 0);
  std::mt19937 rng(2);
  const auto x = testing::random_activations(rng, k);
  std::vector<float> y(static_cast<size_t>(n));
  size_t i = 0;
  for (auto _ : state) {
    matmul(w.views[i], x.data(), 1, y.data(), pool_of(threads));
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % w.views.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(w.views[0].nbytes));
  set_simd(true);
}

// Args: n, k, threads, simd, tokens.
void BM_Gemm(benchmark::State& state, DType t) {
  const int64_t n = state.range(0), k = state.range(1), tokens = state.range(4);
  const int threads = static_cast<int>(state.range(2));
  set_simd(state.range(3) != 0);
  const Weights w = make_weights(t, n, k, 0);
  std::mt19937 rng(3);
  const auto x = testing::random_activations(rng, tokens * k);
  std::vector<float> y(static_cast<size_t>(n * tokens));
  for (auto _ : state) {
    matmul(w.views[0], x.data(), tokens, y.data(), pool_of(threads));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(2 * n * k * tokens),
                                                benchmark::Counter::kIsIterationInvariantRate);
  set_simd(true);
}

// The row-interleaved kernels (packed.h). Args: n, k, threads, tokens, from_dram.
void BM_Packed(benchmark::State& state, DType t) {
  const int64_t n = state.range(0), k = state.range(1), tokens = state.range(3);
  const int threads = static_cast<int>(state.range(2));
  const Weights w = make_weights(t, n, k, state.range(4) != 0 ? kStreamBytes : 0);
  std::vector<PackedMatrix> packed;
  for (const auto& v : w.views) packed.push_back(PackedMatrix::pack(v));
  std::mt19937 rng(3);
  const auto x = testing::random_activations(rng, tokens * k);
  std::vector<float> y(static_cast<size_t>(n * tokens));
  size_t i = 0;
  for (auto _ : state) {
    packed[i].matmul(x.data(), tokens, y.data(), pool_of(threads));
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % packed.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(packed[0].bytes()));
  state.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(2 * n * k * tokens),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DotF32(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::mt19937 rng(4);
  const auto a = testing::random_activations(rng, n), b = testing::random_activations(rng, n);
  for (auto _ : state) benchmark::DoNotOptimize(dot_f32(a.data(), b.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * 8);
}

// One layer's paged attention for a step of `tokens` new tokens of one sequence at the end of
// `context` positions, with Qwen2.5-1.5B's heads (12 query heads, 2 KV heads of 128): decode is
// tokens 1, a verification of drafts 2-17 (its queries share each K/V fetch).
void BM_Attention(benchmark::State& state) {
  const int64_t context = state.range(0), tokens = state.range(1), threads = state.range(2);
  ModelConfig cfg;
  cfg.num_layers = 1;
  cfg.num_heads = 12;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 128;
  const int64_t bs = KvPool::kDefaultBlockSize, n_blocks = (context + bs - 1) / bs;
  KvPool kv(cfg, n_blocks, KvDType::F32, bs);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int64_t i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(n_blocks - 1 - i);
  std::mt19937 rng(5);
  const int64_t kv_dim = cfg.num_kv_heads * cfg.head_dim, q_dim = cfg.num_heads * cfg.head_dim;
  const auto k = testing::random_activations(rng, kv_dim), v = testing::random_activations(rng, kv_dim);
  for (int64_t p = 0; p < context; ++p) kv.store(0, table, p, k.data(), v.data());
  std::vector<int32_t> ids(static_cast<size_t>(tokens), 1);
  SeqSlice slice;
  slice.tokens = ids;
  slice.pos = context - tokens;
  slice.blocks = table;
  ForwardBatch batch;
  batch.kv = &kv;
  batch.seqs = std::span<const SeqSlice>(&slice, 1);
  FlatBatch flat;
  flat.build(batch, 2, bs);
  const auto q = testing::random_activations(rng, tokens * q_dim);
  std::vector<float> out(q.size()), scratch;
  ThreadPool pool(static_cast<int>(threads));
  const AttentionShape shape{cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, 1.0f / std::sqrt(128.0f), 0};
  for (auto _ : state) {
    paged_attention({&kv, 0, false}, batch, flat, shape, q.data(), out.data(), pool, scratch);
    benchmark::DoNotOptimize(out.data());
  }
}

// The shapes of Qwen2.5-0.5B: ffn_up/gate [4864, 896] (32-block formats; 896 is not a
// multiple of 256) and ffn_down [896, 4864] (k-quants).
void register_all() {
  const DType block32[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                           DType::F16,  DType::BF16, DType::F32};
  const DType block256[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K};
  auto add = [](DType t, int64_t n, int64_t k) {
    const std::string name = dtype_name(t);
    for (int simd : {1, 0}) {
      for (int threads : {1, 2}) {
        for (int dram : {1, 0})
          benchmark::RegisterBenchmark(("Gemv/" + name).c_str(), BM_Gemv, t)
              ->Args({n, k, threads, simd, dram})
              ->ArgNames({"n", "k", "threads", "simd", "dram"})
              ->UseRealTime();
        benchmark::RegisterBenchmark(("Gemm64/" + name).c_str(), BM_Gemm, t)
            ->Args({n, k, threads, simd, 64})
            ->ArgNames({"n", "k", "threads", "simd", "tokens"})
            ->UseRealTime();
      }
    }
  };
  for (DType t : block32) add(t, 4864, 896);
  for (DType t : block256) add(t, 896, 4864);
  // Multi-token matmuls of the default model's real shapes (prefill and batched decode at
  // concurrency 16): attn_q/attn_output [896, 896] and ffn_up/gate [4864, 896] in Q5_0/Q4_0,
  // the tied embedding / lm_head [151936, 896] in Q8_0, ffn_down [896, 4864] in Q4_K/Q6_K.
  auto add_gemm = [](DType t, int64_t n, int64_t k) {
    for (int64_t tokens : {16, 64})
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark(("Gemm/" + std::string(dtype_name(t))).c_str(), BM_Gemm, t)
            ->Args({n, k, threads, 1, tokens})
            ->ArgNames({"n", "k", "threads", "simd", "tokens"})
            ->UseRealTime();
  };
  for (DType t : {DType::Q5_0, DType::Q8_0, DType::Q4_0}) {
    add_gemm(t, 896, 896);
    add_gemm(t, 4864, 896);
  }
  add_gemm(DType::Q8_0, 151936, 896);
  for (DType t : {DType::Q4_K, DType::Q6_K}) add_gemm(t, 896, 4864);
  // The same shapes through the row-interleaved kernels, plus decode (tokens 1) and
  // verification (2 to 8 tokens: a draft's rows, 3 and 5 for k = 2 and 4) from DRAM, as in a
  // real step, and from cache (the kernel's own speed: a kernel slower than DRAM shows there).
  auto add_packed = [](DType t, int64_t n, int64_t k) {
    for (int64_t tokens : {1, 2, 3, 4, 5, 8, 16, 64})
      for (int threads : {1, 2})
        for (int dram : {1, 0}) {
          if (dram == 1 && tokens > 8) continue;
          benchmark::RegisterBenchmark(("Packed/" + std::string(dtype_name(t))).c_str(), BM_Packed, t)
              ->Args({n, k, threads, tokens, dram})
              ->ArgNames({"n", "k", "threads", "tokens", "dram"})
              ->UseRealTime();
        }
  };
  for (DType t : {DType::Q5_0, DType::Q8_0, DType::Q4_0}) add_packed(t, 4864, 896);
  for (DType t : {DType::Q4_K, DType::Q6_K}) add_packed(t, 896, 4864);
  // A small decode matmul (attn_k [128, 896]): dominated by per-call and thread hand-off cost.
  for (int threads : {1, 2})
    benchmark::RegisterBenchmark("GemvSmall/Q5_0", BM_Gemv, DType::Q5_0)
        ->Args({128, 896, threads, 1, 0})
        ->ArgNames({"n", "k", "threads", "simd", "dram"})
        ->UseRealTime();
  benchmark::RegisterBenchmark("DotF32", BM_DotF32)->Arg(64)->Arg(128)->Arg(4096);
  for (int64_t tokens : {1, 4, 13})
    for (int threads : {1, 2})
      benchmark::RegisterBenchmark("Attention", BM_Attention)
          ->Args({1500, tokens, threads})
          ->ArgNames({"context", "tokens", "threads"})
          ->UseRealTime();
}

}  // namespace
}  // namespace zen::kernels

int main(int argc, char** argv) {
  zen::kernels::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
