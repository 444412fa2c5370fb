// A Zen6-shaped Gated DeltaNet layer (H 5120, Hk 16, Hv 48, Dk = Dv = 128, conv 4) with
// random weights:
//   BM_GdnPrefillCore/form: the delta rule over 48 heads x T tokens, chunked (form 0) vs
//     recurrent (form 1) - the part of prefill the two forms differ in (the projections are
//     the same matmuls for both). Target: chunked >= 3x faster at T = 2048. As gdn_forward
//     does, the chunked form takes a key head's 3 value heads per call, the recurrent form
//     one value head per call. Work per head and token at D = Dk = Dv = 128: recurrent
//     3 D^2 FMA + D^2 mul (65.5k lane ops); chunked (64-token chunks) about 3.9 D^2 FMA
//     (63.5k: k S, q S, the state update, two triangular 64-token products, a third of the
//     group's q k^T and k k^T), so the chunked form wins only by running its FMAs faster.
//   BM_GdnDecodeLayer: one decode token through the whole layer (bf16 projections, conv, the
//     recurrent state update, gated norm, out_proj): the per-token cost of a GDN layer.
//   BM_GdnDecodeState: only the state update of that token (48 heads of 128 x 128 f32);
//     state_GB/s counts the state read and written once (the least traffic).
//   BM_GdnDecodeStateAllLayers: the same, each call on the next of 48 layers' states (from DRAM).
//   BM_GemmF32Chunk: the chunk's GEMM shapes alone, B packed on every call (gemm_f32);
//   BM_GemmF32Packed: the same with B packed once (as the chunk holds its state and v_new).
//   BM_FmaPeak: the core's f32 FMA ceiling (12 register-resident 256-bit FMA chains).
//
//   zen_gdn_bench --benchmark_filter=Gdn
#include <benchmark/benchmark.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <random>
#include <vector>

#include "base/aligned.h"
#include "base/numeric.h"
#include "base/thread_pool.h"
#include "kernels/cpu/gemm_f32.h"
#include "model/gated_delta_net.h"
#include "model/state_cache.h"

namespace zen {
namespace {

GdnShape zen6_shape() {
  GdnShape s;
  s.hidden = 5120;
  s.num_k_heads = 16;
  s.num_v_heads = 48;
  s.k_head_dim = 128;
  s.v_head_dim = 128;
  s.conv_kernel = 4;
  return s;
}

ThreadPool& pool_of(int threads) {
  static ThreadPool one(1), two(2);
  return threads == 1 ? one : two;
}

// States and scratch are cache-line aligned, as the engine's StatePool and GdnScratch are.

// Layer-layout inputs of the delta rule for T tokens: q k v rows [T, conv_dim] (q, k unit
// norm, q scaled), g and beta [T, Hv].
struct CoreInputs {
  GdnShape s;
  int64_t T;
  std::vector<float> qkv, g, beta, out;
  CoreInputs(const GdnShape& shape, int64_t tokens) : s(shape), T(tokens) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    const int64_t C = s.conv_dim();
    qkv.resize(static_cast<size_t>(T * C));
    for (float& x : qkv) x = normal(rng);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < 2 * s.num_k_heads; ++h) {
        float* v = &qkv[static_cast<size_t>(t * C + h * s.k_head_dim)];
        gdn::l2norm(v, s.k_head_dim, v);
      }
    for (int64_t i = 0; i < T * s.num_v_heads; ++i) {
      g.push_back(-0.1f * uni(rng));
      beta.push_back(uni(rng));
    }
    out.resize(static_cast<size_t>(T * s.value_dim()));
  }
  gdn::HeadInputs head(int64_t h) {
    const int64_t C = s.conv_dim(), kh = h / s.group(), KD = s.key_dim();
    return {&qkv[static_cast<size_t>(kh * s.k_head_dim)], &qkv[static_cast<size_t>(KD + kh * s.k_head_dim)],
            &qkv[static_cast<size_t>(2 * KD + h * s.v_head_dim)], C, &g[static_cast<size_t>(h)],
            &beta[static_cast<size_t>(h)], s.num_v_heads, &out[static_cast<size_t>(h * s.v_head_dim)], s.value_dim()};
  }
};

// Args: T, form (0 chunked, 1 recurrent), threads.
void BM_GdnPrefillCore(benchmark::State& state) {
  const GdnShape s = zen6_shape();
  const int64_t T = state.range(0);
  const bool recurrent = state.range(1) == 1;
  ThreadPool& pool = pool_of(static_cast<int>(state.range(2)));
  CoreInputs in(s, T);
  const int64_t dk = s.k_head_dim, dv = s.v_head_dim, per_head = dk * dv;
  AlignedVector<float> states(static_cast<size_t>(s.num_v_heads * per_head));
  // The chunked form takes a key head's r value heads together (as gdn_forward does).
  const int64_t r = s.group();
  const int64_t scratch_floats = gdn::chunk_scratch_floats(dk, dv, r);
  AlignedVector<float> scratch(static_cast<size_t>(pool.size() * scratch_floats));
  for (auto _ : state) {
    std::fill(states.begin(), states.end(), 0.0f);
    if (recurrent) {
      pool.parallel_for(s.num_v_heads, [&](int64_t begin, int64_t end, int) {
        for (int64_t h = begin; h < end; ++h)
          gdn::recurrent(in.head(h), T, dk, dv, &states[static_cast<size_t>(h * per_head)]);
      });
    } else {
      pool.parallel_for(s.num_k_heads, [&](int64_t begin, int64_t end, int thread) {
        for (int64_t kh = begin; kh < end; ++kh) {
          std::vector<gdn::HeadInputs> heads;
          std::vector<float*> group_states;
          for (int64_t h = kh * r; h < (kh + 1) * r; ++h) {
            heads.push_back(in.head(h));
            group_states.push_back(&states[static_cast<size_t>(h * per_head)]);
          }
          gdn::chunked(heads.data(), group_states.data(), r, T, 0, dk, dv,
                       &scratch[static_cast<size_t>(thread * scratch_floats)]);
        }
      });
    }
    benchmark::DoNotOptimize(in.out.data());
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GdnPrefillCore)
    ->ArgNames({"T", "recurrent", "threads"})
    ->Args({2048, 0, 1})
    ->Args({2048, 1, 1})
    ->Args({2048, 0, 2})
    ->Args({2048, 1, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_GdnDecodeState(benchmark::State& state) {
  const GdnShape s = zen6_shape();
  ThreadPool& pool = pool_of(static_cast<int>(state.range(0)));
  CoreInputs in(s, 1);
  const int64_t dk = s.k_head_dim, dv = s.v_head_dim, per_head = dk * dv;
  AlignedVector<float> states(static_cast<size_t>(s.num_v_heads * per_head), 0.01f);
  for (auto _ : state) {
    pool.parallel_for(s.num_v_heads, [&](int64_t begin, int64_t end, int) {
      for (int64_t h = begin; h < end; ++h) gdn::recurrent(in.head(h), 1, dk, dv, &states[static_cast<size_t>(h * per_head)]);
    });
    benchmark::DoNotOptimize(in.out.data());
  }
  state.counters["state_GB/s"] = benchmark::Counter(2.0 * static_cast<double>(states.size() * sizeof(float)),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GdnDecodeState)->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same token's state update with every layer's state in turn (48 layers x 3 MB, as a
// Zen6 decode step walks them): each layer's state comes from DRAM, not from cache.
void BM_GdnDecodeStateAllLayers(benchmark::State& state) {
  const GdnShape s = zen6_shape();
  ThreadPool& pool = pool_of(static_cast<int>(state.range(0)));
  constexpr int64_t kLayers = 48;
  CoreInputs in(s, 1);
  const int64_t dk = s.k_head_dim, dv = s.v_head_dim, per_head = dk * dv, per_layer = s.num_v_heads * per_head;
  AlignedVector<float> states(static_cast<size_t>(kLayers * per_layer), 0.01f);
  int64_t layer = 0;
  for (auto _ : state) {
    float* layer_states = &states[static_cast<size_t>(layer * per_layer)];
    pool.parallel_for(s.num_v_heads, [&](int64_t begin, int64_t end, int) {
      for (int64_t h = begin; h < end; ++h) gdn::recurrent(in.head(h), 1, dk, dv, layer_states + h * per_head);
    });
    layer = (layer + 1) % kLayers;
    benchmark::DoNotOptimize(in.out.data());
  }
  state.counters["state_GB/s"] = benchmark::Counter(2.0 * static_cast<double>(per_layer * sizeof(float)),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GdnDecodeStateAllLayers)->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

// A bf16 matrix [rows, cols] of random values, bound as a plain Linear.
struct RandomLinear {
  std::vector<uint16_t> data;
  TensorView view;
  Linear linear;
  RandomLinear(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    data.resize(static_cast<size_t>(rows * cols));
    for (uint16_t& x : data) x = f32_to_bf16(normal(rng));
    view.name = "w";
    view.dtype = DType::BF16;
    view.shape = {rows, cols};
    view.data = reinterpret_cast<const uint8_t*>(data.data());
    view.nbytes = data.size() * sizeof(uint16_t);
    linear.format = LinearFormat::Plain;
    linear.name = "w";
    linear.rows = rows;
    linear.cols = cols;
    linear.weight = &view;
  }
};

void BM_GdnDecodeLayer(benchmark::State& state) {
  const GdnShape s = zen6_shape();
  ThreadPool& pool = pool_of(static_cast<int>(state.range(0)));
  const int64_t H = s.hidden, Hv = s.num_v_heads;
  RandomLinear qkv(s.conv_dim(), H, 1), z(s.value_dim(), H, 2), b(Hv, H, 3), a(Hv, H, 4), out(H, s.value_dim(), 5);
  GdnWeights w;
  w.in_qkv = qkv.linear;
  w.in_z = z.linear;
  w.in_b = b.linear;
  w.in_a = a.linear;
  w.out = out.linear;
  w.conv_w.assign(static_cast<size_t>(s.conv_kernel * s.conv_dim()), 0.3f);
  w.neg_A.assign(static_cast<size_t>(Hv), -1.0f);
  w.dt_bias.assign(static_cast<size_t>(Hv), 0.0f);
  w.norm.assign(static_cast<size_t>(s.v_head_dim), 1.0f);
  StatePool states(s.state_floats(), 1);
  const std::vector<int32_t> token = {5}, blocks = {0};
  SeqSlice seq;
  seq.tokens = token;
  seq.pos = 0;  // the layer alone does not zero states; pos only places chunks
  seq.blocks = blocks;
  seq.state_slot = 0;
  ForwardBatch batch;
  batch.states = &states;
  batch.seqs = std::span<const SeqSlice>(&seq, 1);
  FlatBatch flat;
  flat.build(batch, 16, 16);
  std::vector<float> xn(static_cast<size_t>(H), 0.5f), y(static_cast<size_t>(H));
  GdnScratch scratch;
  for (auto _ : state) {
    gdn_forward(w, s, 0, batch, flat, xn.data(), y.data(), GdnMode::Auto, scratch, pool);
    benchmark::DoNotOptimize(y.data());
  }
  const double weight_bytes = 2.0 * static_cast<double>(qkv.data.size() + z.data.size() + b.data.size() +
                                                        a.data.size() + out.data.size());
  state.counters["weights_GB/s"] = benchmark::Counter(weight_bytes, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GdnDecodeLayer)->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The chunk's GEMM shape alone ([64, 128] x [128, 128]): the ceiling of the chunked form.
void BM_GemmF32Chunk(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  std::vector<float> A(static_cast<size_t>(M * K), 0.5f), B(static_cast<size_t>(K * N), 0.25f),
      C(static_cast<size_t>(M * N));
  for (auto _ : state) {
    kernels::gemm_f32(M, N, K, A.data(), K, B.data(), N, C.data(), N, /*accumulate=*/true);
    benchmark::DoNotOptimize(C.data());
  }
  state.counters["GFMA/s"] = benchmark::Counter(static_cast<double>(M * N * K) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GemmF32Chunk)->ArgNames({"M", "N", "K"})->Args({64, 128, 128})->Args({128, 128, 64})->UseRealTime();

// The same with B packed once outside the loop (as the chunk packs its state and v_new).
void BM_GemmF32Packed(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  std::vector<float> A(static_cast<size_t>(M * K), 0.5f), B(static_cast<size_t>(K * N), 0.25f),
      Bp(static_cast<size_t>(kernels::packed_b_floats(K, N))), C(static_cast<size_t>(M * N));
  kernels::pack_b_f32(K, N, B.data(), N, Bp.data());
  for (auto _ : state) {
    kernels::gemm_f32_packed(M, N, K, A.data(), K, Bp.data(), K, C.data(), N, 1.0f);
    benchmark::DoNotOptimize(C.data());
  }
  state.counters["GFMA/s"] = benchmark::Counter(static_cast<double>(M * N * K) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GemmF32Packed)
    ->ArgNames({"M", "N", "K"})
    ->Args({64, 128, 128})
    ->Args({128, 128, 128})
    ->Args({128, 128, 64})
    ->UseRealTime();

#if defined(__x86_64__)
// The core's f32 FMA ceiling for the GEMM numbers above: 12 independent 256-bit FMA chains in
// registers (distinct starting values, so the compiler cannot merge them).
__attribute__((target("avx2,fma"))) void BM_FmaPeak(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    state.SkipWithError("no AVX2/FMA");
    return;
  }
  constexpr int64_t kSteps = 1 << 20;
  const __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-7f);
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.1f * static_cast<float>(i + 1));
  for (auto _ : state) {
    for (int64_t s = 0; s < kSteps; ++s) {
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], b, c);
    }
    benchmark::DoNotOptimize(acc);
  }
  state.counters["GFMA/s"] = benchmark::Counter(static_cast<double>(kSteps * 12 * 8) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FmaPeak)->UseRealTime();
#endif

}  // namespace
}  // namespace zen

BENCHMARK_MAIN();
