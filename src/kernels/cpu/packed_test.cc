// Row-interleaved weights: the AVX2 kernels equal the scalar reference of the packed
// arithmetic bit for bit at every token count and thread count (batch invariance), and the
// packed arithmetic stays within f32 rounding of ref::vec_dot on the source rows (so packing
// kept every quant and scale).
#include "kernels/cpu/packed.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <random>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/kernels_test_util.h"
#include "kernels/cpu/nvfp4.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/simd.h"
#if ZEN_HAVE_X86_SIMD
#include "kernels/cpu/packed_avx2.h"
#endif

namespace zen::kernels {
namespace {

using testing::random_activations;

const DType kPackedDtypes[] = {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q6_K};

using Source = testing::RandomMatrix;

int64_t k_for(DType t, int variant) {
  if (dtype_block_elems(t) == 256) return variant == 0 ? 256 : 768;
  return variant == 0 ? 32 * 3 : 32 * 19;
}

std::vector<float> run(const PackedMatrix& p, const std::vector<float>& x, int64_t T, ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(T * p.rows()), -1.0f);
  p.matmul(x.data(), T, y.data(), pool);
  return y;
}

std::vector<float> run_reference(const PackedMatrix& p, const std::vector<float>& x, int64_t T) {
  std::vector<float> y(static_cast<size_t>(T * p.rows()), -1.0f);
  p.matmul_reference(x.data(), T, y.data());
  return y;
}

bool bits_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// Rows read back from the packed copy are the source rows' dequantization bit for bit (tied
// embeddings read their rows there), including a partial last group; the bytes are fully
// random, so every scale and quant bit takes part.
TEST(Packed, DequantizedRowsEqualTheSourceRows) {
  std::mt19937 rng(37);
  for (DType t : kPackedDtypes)
    for (int variant = 0; variant < 2; ++variant) {
      const int64_t K = k_for(t, variant), N = 13;
      std::vector<uint8_t> bytes(static_cast<size_t>(N) * dtype_row_bytes(t, K));
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      TensorView view;
      view.name = "w";
      view.dtype = t;
      view.shape = {N, K};
      view.data = bytes.data();
      view.nbytes = bytes.size();
      const PackedMatrix p = PackedMatrix::pack(view);
      std::vector<float> want(static_cast<size_t>(K)), got(static_cast<size_t>(K));
      for (int64_t r = 0; r < N; ++r) {
        dequantize_row(t, bytes.data() + static_cast<size_t>(r) * dtype_row_bytes(t, K), want.data(), K);
        p.dequantize_row(r, got.data());
        ASSERT_TRUE(bits_equal(want.data(), got.data(), want.size())) << dtype_name(t) << " K " << K << " row " << r;
      }
      EXPECT_THROW(p.dequantize_row(N, got.data()), Error);
    }
}

TEST(Packed, KernelsEqualTheReferenceBitForBit) {
  if (!PackedMatrix::available()) GTEST_SKIP() << "no AVX2: the packed kernels are not used on this CPU";
  std::mt19937 rng(31);
  ThreadPool pool(2);
  for (DType t : kPackedDtypes)
    for (int variant = 0; variant < 2; ++variant) {
      const int64_t K = k_for(t, variant);
      for (int64_t N : {8, 13, 45}) {  // one group, a partial group, several groups
        const Source s(rng, t, N, K);
        const PackedMatrix p = PackedMatrix::pack(s.view);
        for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 70}) {
          const auto x = random_activations(rng, T * K);
          const auto want = run_reference(p, x, T);
          const auto got = run(p, x, T, pool);
          EXPECT_TRUE(bits_equal(got.data(), want.data(), got.size()))
              << dtype_name(t) << " N=" << N << " K=" << K << " T=" << T;
        }
      }
    }
}

// Two shapes: 301 rows x K = 1024 (big enough that decode splits groups over the pool too;
// 70 tokens in two passes of 35), and K = 8192, whose rows hold 9-10 KB of activations a token,
// so 37 tokens run in passes of 13, 13 and 11 (a pass keeps its activation rows within an L2
// budget; what that buys is speed, bench/README.md). Either way every token gets the same bits
// alone, in the batch, at any thread count, and the reference's.
TEST(Packed, BatchInvariantAcrossTokenCountsAndThreads) {
  struct Shape {
    int64_t k, n, tokens;
    std::vector<int64_t> check;  // tokens also run alone: ends and pass boundaries
  };
  const Shape shapes[] = {{1024, 301, 70, {0, 1, 34, 35, 69}}, {8192, 21, 37, {0, 12, 13, 26, 36}}};
  std::mt19937 rng(32);
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (const Shape& shape : shapes)
    for (DType t : kPackedDtypes) {
      const int64_t K = shape.k, N = shape.n, T = shape.tokens;
      const Source s(rng, t, N, K);
      const PackedMatrix p = PackedMatrix::pack(s.view);
      const auto x = random_activations(rng, T * K);
      const auto batch = run(p, x, T, pool2);
      const std::string what = std::string(dtype_name(t)) + " K=" + std::to_string(K);
      EXPECT_TRUE(bits_equal(batch.data(), run_reference(p, x, T).data(), batch.size())) << what;
      EXPECT_TRUE(bits_equal(batch.data(), run(p, x, T, pool1).data(), batch.size())) << what;
      EXPECT_TRUE(bits_equal(batch.data(), run(p, x, T, pool3).data(), batch.size())) << what;
      for (int64_t tok : shape.check) {
        const std::vector<float> one(x.begin() + tok * K, x.begin() + (tok + 1) * K);
        for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
          const auto y1 = run(p, one, 1, *pool);
          EXPECT_TRUE(bits_equal(y1.data(), &batch[static_cast<size_t>(tok * N)], static_cast<size_t>(N)))
              << what << " token " << tok << " alone differs from its row in the batch";
        }
      }
    }
}

// The packed arithmetic against the per-row reference dot (ref::vec_dot on the source blocks
// and the scalar-quantized activation): equal up to f32 rounding of the block sums.
TEST(Packed, MatchesTheSourceRowsDotProducts) {
  std::mt19937 rng(33);
  for (DType t : kPackedDtypes) {
    const int64_t K = k_for(t, 1), N = 21, T = 3;
    const Source s(rng, t, N, K);
    const PackedMatrix p = PackedMatrix::pack(s.view);
    EXPECT_EQ(p.rows(), N);
    EXPECT_EQ(p.cols(), K);
    const auto x = random_activations(rng, T * K);
    const auto y = run_reference(p, x, T);
    const size_t row_bytes = dtype_row_bytes(t, K);
    std::vector<float> wf(static_cast<size_t>(K));
    for (int64_t tok = 0; tok < T; ++tok) {
      std::vector<uint8_t> act(activation_row_bytes(t, K));
      quantize_activation(t, &x[static_cast<size_t>(tok * K)], act.data(), K);
      for (int64_t r = 0; r < N; ++r) {
        const uint8_t* row = s.bytes.data() + static_cast<size_t>(r) * row_bytes;
        const float want = ref::vec_dot(t, row, act.data(), K);
        ref::dequantize_row(t, row, wf.data(), K);
        double mag = 0.0;
        for (int64_t i = 0; i < K; ++i) mag += std::fabs(wf[static_cast<size_t>(i)] * x[static_cast<size_t>(tok * K + i)]);
        EXPECT_NEAR(y[static_cast<size_t>(tok * N + r)], want, 2e-5 * mag + 1e-30)
            << dtype_name(t) << " row " << r << " token " << tok;
      }
    }
  }
}

TEST(Packed, FastPackingEqualsTheElementwiseDefinition) {
  std::mt19937 rng(36);
  for (DType t : kPackedDtypes)
    for (int64_t N : {8, 13, 4000}) {  // 4000 rows: over 1 MB, packed by several threads
      const int64_t K = k_for(t, 1);
      const Source s(rng, t, N, K);
      const PackedMatrix fast = PackedMatrix::pack(s.view), slow = PackedMatrix::pack_reference(s.view);
      ASSERT_EQ(fast.bytes(), slow.bytes());
      EXPECT_EQ(std::memcmp(fast.data(), slow.data(), fast.bytes()), 0) << dtype_name(t) << " N=" << N;
    }
}

TEST(Packed, ZeroWeightsGiveZeros) {
  std::mt19937 rng(34);
  for (DType t : kPackedDtypes) {
    const int64_t K = k_for(t, 0);
    Source s(rng, t, 9, K);
    std::memset(s.bytes.data(), 0, s.bytes.size());
    const PackedMatrix p = PackedMatrix::pack(s.view);
    std::vector<float> x(static_cast<size_t>(2 * K), 1.0f);
    ThreadPool pool(1);
    for (float v : run(p, x, 2, pool)) EXPECT_EQ(v, 0.0f) << dtype_name(t);
  }
}

TEST(Packed, RejectsUnsupportedOrTruncatedTensors) {
  std::mt19937 rng(35);
  Source s(rng, DType::Q4_1, 8, 64);
  EXPECT_FALSE(PackedMatrix::supports(DType::Q4_1));
  EXPECT_THROW(PackedMatrix::pack(s.view), Error);
  Source q(rng, DType::Q8_0, 8, 64);
  q.view.nbytes -= 1;
  EXPECT_THROW(PackedMatrix::pack(q.view), Error);
}

// --- NVFP4 ------------------------------------------------------------------------------------

struct RandomNvfp4 {
  std::vector<uint8_t> codes, scales;
  Nvfp4Matrix m;
  RandomNvfp4(std::mt19937& rng, int64_t rows, int64_t cols) {
    codes.resize(static_cast<size_t>(rows * cols / 2));
    for (auto& b : codes) b = static_cast<uint8_t>(rng());
    scales.resize(static_cast<size_t>(rows * cols / kNvfp4GroupSize));
    // Every finite E4M3 code, subnormals and negative scales included (ModelOpt writes only
    // positive ones, but the format allows them).
    std::uniform_int_distribution<int> code(0x00, 0x7E);
    for (auto& c : scales) c = static_cast<uint8_t>(code(rng) | (rng() % 8 == 0 ? 0x80 : 0));
    m = Nvfp4Matrix{codes.data(), scales.data(), rows, cols, 0.0123f};
  }
};

TEST(PackedNvfp4, KernelsEqualTheReferenceBitForBitAndAreBatchInvariant) {
  if (!PackedMatrix::available()) GTEST_SKIP() << "no AVX2: the packed kernels are not used on this CPU";
  std::mt19937 rng(41);
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (int64_t K : {32, 96, 608})
    for (int64_t N : {8, 13, 45}) {
      const RandomNvfp4 w(rng, N, K);
      const PackedMatrix p = PackedMatrix::pack_nvfp4(w.m, "w");
      EXPECT_EQ(p.dtype(), DType::U8);
      for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 70}) {
        const auto x = random_activations(rng, T * K);
        const auto want = run_reference(p, x, T);
        EXPECT_TRUE(bits_equal(run(p, x, T, pool2).data(), want.data(), want.size())) << "N=" << N << " K=" << K << " T=" << T;
        if (T != 70) continue;
        EXPECT_TRUE(bits_equal(run(p, x, T, pool1).data(), want.data(), want.size()));
        EXPECT_TRUE(bits_equal(run(p, x, T, pool3).data(), want.data(), want.size()));
        for (int64_t tok : {0, 33, 69}) {  // alone equals its row in the batch
          const std::vector<float> one(x.begin() + tok * K, x.begin() + (tok + 1) * K);
          EXPECT_TRUE(bits_equal(run(p, one, 1, pool2).data(), &want[static_cast<size_t>(tok * N)], static_cast<size_t>(N)));
        }
      }
    }
}

// The packed arithmetic against the dequantized weights dotted with the Q8_0-rounded
// activation in double: equal up to f32 rounding. This proves packing kept every code and
// scale, and that the lookup table, offsets and scale factors are right.
TEST(PackedNvfp4, MatchesTheDequantizedRowsOnQuantizedActivations) {
  std::mt19937 rng(42);
  const int64_t K = 608, N = 21, T = 3;
  const RandomNvfp4 w(rng, N, K);
  const PackedMatrix p = PackedMatrix::pack_nvfp4(w.m, "w");
  const auto x = random_activations(rng, T * K);
  const auto y = run_reference(p, x, T);
  std::vector<float> wf(static_cast<size_t>(K)), xq(static_cast<size_t>(K));
  std::vector<BlockQ8_0> q(static_cast<size_t>(K / 32));
  for (int64_t tok = 0; tok < T; ++tok) {
    quantize_activation(DType::Q8_0, &x[static_cast<size_t>(tok * K)], q.data(), K);
    ref::dequantize_row(DType::Q8_0, reinterpret_cast<const uint8_t*>(q.data()), xq.data(), K);
    for (int64_t r = 0; r < N; ++r) {
      nvfp4_dequantize_row(w.m, r, wf.data());
      double want = 0.0, mag = 0.0;
      for (size_t i = 0; i < wf.size(); ++i) {
        want += static_cast<double>(wf[i]) * xq[i];
        mag += std::fabs(static_cast<double>(wf[i]) * xq[i]);
      }
      EXPECT_NEAR(y[static_cast<size_t>(tok * N + r)], want, 1e-6 * mag + 1e-30) << "row " << r << " token " << tok;
    }
  }
}

TEST(PackedNvfp4, FastPackingEqualsTheElementwiseDefinition) {
  std::mt19937 rng(43);
  for (int64_t N : {8, 13, 4000}) {  // 4000 rows: over 1 MB, packed by several threads
    const RandomNvfp4 w(rng, N, 608);
    const PackedMatrix fast = PackedMatrix::pack_nvfp4(w.m, "w"), slow = PackedMatrix::pack_nvfp4_reference(w.m, "w");
    ASSERT_EQ(fast.bytes(), slow.bytes());
    EXPECT_EQ(fast.bytes(), static_cast<size_t>((N + 7) / 8 * 8 * 608 * 9 / 16));  // 4.5 bits a weight
    EXPECT_EQ(std::memcmp(fast.data(), slow.data(), fast.bytes()), 0) << "N=" << N;
  }
}

TEST(PackedNvfp4, RejectsNaNScalesAndOddWidthsNamingTheTensor) {
  std::mt19937 rng(44);
  RandomNvfp4 w(rng, 9, 64);
  w.scales[5] = 0xFF;  // E4M3 NaN
  try {
    PackedMatrix::pack_nvfp4(w.m, "model.layers.3.mlp.up_proj.weight");
    ADD_FAILURE() << "a NaN scale was packed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.3.mlp.up_proj.weight"), std::string::npos) << e.what();
  }
  const RandomNvfp4 narrow(rng, 8, 48);
  EXPECT_FALSE(PackedMatrix::nvfp4_packable(narrow.m));
  EXPECT_THROW(PackedMatrix::pack_nvfp4(narrow.m, "w"), Error);
}

}  // namespace
}  // namespace zen::kernels

// --- Every x86 instruction set this CPU has, run natively ----------------------------------

#if ZEN_HAVE_X86_SIMD
namespace zen::kernels {
namespace {

// matmul() runs only the best kernels the CPU has; this runs each build the CPU can execute
// (AVX2, AVX-VNNI, AVX512-VNNI) on every packed format, in one call and in calls of 1, 2
// and 3 groups, against the scalar reference. The builds a CPU lacks are checked in
// emulation instead (tests/test_emulated_isa.py).
class PackedIsa : public ::testing::TestWithParam<const char*> {};

std::vector<float> run_isa(PackedGroupsFn fn, const PackedMatrix& p, const std::vector<float>& x, int64_t T,
                           int64_t split) {
  std::vector<float> y(static_cast<size_t>(T * p.rows()), std::numeric_limits<float>::quiet_NaN());
  const avx2::PackedProblem problem = p.problem(x.data(), T, y.data());
  for (int64_t g = 0; g < problem.n_groups; g += split) fn(problem, g, std::min(g + split, problem.n_groups));
  return y;
}

void expect_isa_equals_reference(PackedGroupsFn fn, const PackedMatrix& p, std::mt19937& rng, const std::string& what) {
  for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 70}) {
    const auto x = random_activations(rng, T * p.cols());
    const auto want = run_reference(p, x, T);
    // One group a call, pairs from even groups (as the pool's even chunks run them), pairs
    // from odd ones, all in one call.
    for (int64_t split : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1} << 20})
      EXPECT_TRUE(bits_equal(run_isa(fn, p, x, T, split).data(), want.data(), want.size()))
          << what << " T=" << T << " groups per call " << split;
  }
}

TEST_P(PackedIsa, EqualsTheReferenceBitForBitOnEveryFormat) {
  const char* isa = GetParam();
  if (!packed_isa_supported(isa)) GTEST_SKIP() << "this CPU lacks " << isa << "; tests/test_emulated_isa.py runs it in Bochs";
  const PackedGroupsFn fn = packed_groups_for(isa);
  std::mt19937 rng(43);
  for (DType t : kPackedDtypes)
    for (int variant = 0; variant < 2; ++variant)
      for (int64_t N : {8, 13, 45}) {
        const Source s(rng, t, N, k_for(t, variant));
        expect_isa_equals_reference(fn, PackedMatrix::pack(s.view), rng,
                                    std::string(isa) + " " + dtype_name(t) + " N=" + std::to_string(N));
      }
  for (int64_t K : {32, 608})
    for (int64_t N : {8, 13, 45}) {
      const RandomNvfp4 w(rng, N, K);
      expect_isa_equals_reference(fn, PackedMatrix::pack_nvfp4(w.m, "w"), rng,
                                  std::string(isa) + " NVFP4 K=" + std::to_string(K) + " N=" + std::to_string(N));
    }
}

INSTANTIATE_TEST_SUITE_P(Native, PackedIsa, ::testing::Values("avx2", "avxvnni", "avx512vnni"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace zen::kernels
#endif
