// FP8 decode tables (exhaustive, against torch's float8 types via the fixture script) and the
// FP8 matmul: AVX2 vs scalar reference on odd shapes, batch and thread invariance.
#include "kernels/cpu/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "io/safetensors.h"
#include "kernels/cpu/fp_gemm_test_util.h"
#include "kernels/cpu/kernels_test_util.h"
#include "kernels/cpu/nvfp4.h"
#include "kernels/cpu/simd.h"

namespace zen::kernels {
namespace {

const std::filesystem::path kTables = std::filesystem::path(ZEN_SOURCE_DIR) / "tests/fixtures/fpquant/decode_tables.safetensors";

std::vector<float> table_from_fixture(const SafetensorsFile& f, const std::string& name) {
  for (const TensorView& t : f.tensors())
    if (t.name == name) {
      EXPECT_EQ(t.dtype, DType::F32);
      std::vector<float> v(static_cast<size_t>(t.numel()));
      std::memcpy(v.data(), t.data, t.nbytes);
      return v;
    }
  ADD_FAILURE() << "no tensor " << name << " in " << kTables;
  return {};
}

void expect_same_float(float expected, float actual, int code, const char* what) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << what << " code " << code;
  } else {
    EXPECT_EQ(f32_to_bits(expected), f32_to_bits(actual)) << what << " code " << code << ": " << expected
                                                            << " vs " << actual;
  }
}

// The row decoders (KV-cache reads; SIMD where available) equal the tables bit for bit: every
// code, in every lane position, NaN codes included, and rows of odd lengths.
TEST(Fp8Decode, RowDecodersEqualTheTablesBitForBit) {
  std::vector<uint8_t> codes(256 * 9 + 5);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 7 + i / 256) % 256);
  for (const bool e5m2 : {false, true}) {
    const float* table = e5m2 ? e5m2_lut() : e4m3_lut();
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{100}, static_cast<int64_t>(codes.size())}) {
      std::vector<float> out(static_cast<size_t>(n));
      (e5m2 ? dequantize_e5m2 : dequantize_e4m3)(codes.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        uint32_t got, want;
        std::memcpy(&got, &out[static_cast<size_t>(i)], 4);
        std::memcpy(&want, &table[codes[static_cast<size_t>(i)]], 4);
        ASSERT_EQ(got, want) << (e5m2 ? "e5m2" : "e4m3") << " code " << int{codes[static_cast<size_t>(i)]} << " at " << i;
      }
    }
  }
}

TEST(Fp8Decode, TablesMatchTorchExhaustively) {
  if (!std::filesystem::exists(kTables)) GTEST_SKIP() << "fixture absent: " << kTables;
  const SafetensorsFile f(kTables.string());
  const std::vector<float> e4m3 = table_from_fixture(f, "e4m3"), e5m2 = table_from_fixture(f, "e5m2"),
                           e2m1 = table_from_fixture(f, "e2m1");
  ASSERT_EQ(e4m3.size(), 256u);
  ASSERT_EQ(e5m2.size(), 256u);
  ASSERT_EQ(e2m1.size(), 16u);
  for (int i = 0; i < 256; ++i) {
    const auto b = static_cast<uint8_t>(i);
    expect_same_float(e4m3[b], e4m3_to_f32(b), i, "e4m3");
    expect_same_float(e4m3[b], ref::e4m3_decode(b), i, "e4m3 ref");
    expect_same_float(e5m2[b], e5m2_to_f32(b), i, "e5m2");
    expect_same_float(e5m2[b], ref::e5m2_decode(b), i, "e5m2 ref");
  }
  for (int i = 0; i < 16; ++i) expect_same_float(e2m1[static_cast<size_t>(i)], e2m1_to_f32(static_cast<uint8_t>(i)), i, "e2m1");
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.0f);
}

// Random E4M3 bytes without the NaN codes (checkpoints never hold them).
std::vector<uint8_t> random_e4m3(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    do b = static_cast<uint8_t>(rng());
    while ((b & 0x7F) == 0x7F);
  }
  return v;
}

struct Fp8Case {
  int64_t rows, cols, block_rows, block_cols;  // block 0: per-tensor
};

class Fp8MatrixTest : public ::testing::TestWithParam<Fp8Case> {
 protected:
  void SetUp() override {
    const Fp8Case c = GetParam();
    std::mt19937 rng(static_cast<uint32_t>(c.rows * 1000 + c.cols));
    bytes_ = random_e4m3(rng, static_cast<size_t>(c.rows * c.cols));
    m_.data = bytes_.data();
    m_.rows = c.rows;
    m_.cols = c.cols;
    m_.block_rows = c.block_rows == 0 ? c.rows : c.block_rows;
    m_.block_cols = c.block_cols == 0 ? c.cols : c.block_cols;
    std::uniform_real_distribution<float> u(0.001f, 0.01f);
    scales_.resize(static_cast<size_t>(((c.rows + m_.block_rows - 1) / m_.block_rows) * m_.scale_cols()));
    for (float& s : scales_) s = u(rng);
    m_.scales = scales_.data();
  }
  std::vector<uint8_t> bytes_;
  std::vector<float> scales_;
  Fp8Matrix m_;
};

TEST_P(Fp8MatrixTest, SimdMatchesScalarAndDequantizedRows) {
  std::mt19937 rng(7);
  const std::vector<float> x = testing::random_activations(rng, m_.cols);
  std::vector<float> row(static_cast<size_t>(m_.cols));
  for (int64_t r = 0; r < m_.rows; ++r) {
    fp8_dequantize_row(m_, r, row.data());
    double exact = 0.0, magnitude = 0.0;
    for (int64_t k = 0; k < m_.cols; ++k) {
      exact += static_cast<double>(row[k]) * x[k];
      magnitude += std::fabs(static_cast<double>(row[k]) * x[k]);
    }
    const float tol = static_cast<float>(1e-5 * magnitude + 1e-30);
    EXPECT_NEAR(ref::fp8_row_dot(m_, r, x.data()), exact, tol) << "row " << r;
    EXPECT_NEAR(fp8_row_dot(m_, r, x.data()), exact, tol) << "row " << r << " (dispatched)";
  }
}

TEST_P(Fp8MatrixTest, BatchAndThreadInvariant) {
  std::mt19937 rng(11);
  constexpr int64_t T = 70;  // crosses the 64-token tile
  const std::vector<float> x = testing::random_activations(rng, T * m_.cols);
  ThreadPool one(1), two(2);
  std::vector<float> batch(static_cast<size_t>(T * m_.rows)), batch2(batch.size()), single(static_cast<size_t>(m_.rows));
  fp8_matmul(m_, x.data(), T, batch.data(), one);
  fp8_matmul(m_, x.data(), T, batch2.data(), two);
  EXPECT_EQ(batch, batch2);
  for (int64_t t = 0; t < T; ++t) {  // every token: each sits at its own place in the 3-token tiles
    fp8_matmul(m_, x.data() + t * m_.cols, 1, single.data(), two);
    for (int64_t r = 0; r < m_.rows; ++r) EXPECT_EQ(single[r], batch[t * m_.rows + r]) << "t " << t << " r " << r;
  }
}

// Position i of a whole 32-column chunk in the AVX2 chains holds this element of the chunk
// (fp8.cc: two 16-byte halves, 4 bytes at a time, shuffled to the tops of 32-bit lanes).
int chunk32_element(int i) { return (i % 8 < 4) ? 4 * (i / 8) + i % 8 : 16 + 4 * (i / 8) + i % 8 - 4; }

// With AVX2 the product is bit for bit fp_gemm.h's order, at every token of a batch that spans
// several row panels and token tiles. With 8-column-aligned scale blocks: chains over the
// E4M3 values times 2^-120 against the activations times 2^64, each scale block's whole
// 32-column chunks in chunk32_element order, folded with the block scales times 2^56. With odd
// block widths: one chain over the dequantized row in order.
TEST_P(Fp8MatrixTest, SimdMatmulFollowsTheFpGemmOrder) {
  if (!use_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(13);
  constexpr int64_t T = 70;
  const std::vector<float> x = testing::random_activations(rng, T * m_.cols);
  ThreadPool two(2);
  std::vector<float> y(static_cast<size_t>(T * m_.rows)), row(static_cast<size_t>(m_.cols));
  fp8_matmul(m_, x.data(), T, y.data(), two);
  const bool segmented = m_.block_cols % 8 == 0 || m_.block_cols >= m_.cols;
  // Column order of the chains: per block, its whole 32-column chunks permuted, the rest as is.
  std::vector<int64_t> order(static_cast<size_t>(m_.cols));
  for (int64_t k = 0; k < m_.cols; ++k) order[k] = k;
  for (int64_t k0 = 0; segmented && k0 < m_.cols; k0 += m_.block_cols)
    for (int64_t i = k0; i + 32 <= std::min(m_.cols, k0 + m_.block_cols); i += 32)
      for (int e = 0; e < 32; ++e) order[i + e] = i + chunk32_element(e);
  std::vector<float> scales(static_cast<size_t>(m_.scale_cols())), xt(static_cast<size_t>(m_.cols));
  for (int64_t r = 0; r < m_.rows; ++r) {
    if (segmented) {
      for (int64_t k = 0; k < m_.cols; ++k) row[k] = std::ldexp(e4m3_to_f32(m_.data[r * m_.cols + order[k]]), -120);
      for (int64_t cb = 0; cb < m_.scale_cols(); ++cb)
        scales[cb] = m_.scales[(r / m_.block_rows) * m_.scale_cols() + cb] * std::ldexp(1.0f, 56);
    } else {
      fp8_dequantize_row(m_, r, row.data());
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < m_.cols; ++k)
        xt[k] = segmented ? std::ldexp(x[t * m_.cols + order[k]], 64) : x[t * m_.cols + k];
      const float expected = segmented
                                 ? testing::fp_gemm_segmented_dot(row.data(), xt.data(), m_.cols, m_.block_cols, scales.data())
                                 : testing::fp_gemm_order_dot(row.data(), xt.data(), m_.cols);
      ASSERT_EQ(expected, y[t * m_.rows + r]) << "r " << r << " t " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8MatrixTest,
                         ::testing::Values(Fp8Case{7, 1, 0, 0}, Fp8Case{5, 37, 0, 0}, Fp8Case{33, 160, 0, 0},
                                           Fp8Case{130, 300, 128, 128}, Fp8Case{9, 144, 128, 128},
                                           Fp8Case{17, 71, 8, 16}, Fp8Case{300, 520, 128, 128},
                                           Fp8Case{11, 45, 4, 12}));  // 8-column chunks straddle blocks

}  // namespace
}  // namespace zen::kernels
