// NVFP4 matmul: AVX2 or NEON vs scalar reference, against dequantized rows, batch/thread invariance.
#include "kernels/cpu/nvfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/fp_gemm_test_util.h"
#include "kernels/cpu/kernels_test_util.h"
#include "kernels/cpu/simd.h"

namespace zen::kernels {
namespace {

struct Nvfp4Fixture {
  std::vector<uint8_t> codes, scales;
  Nvfp4Matrix m;
  Nvfp4Fixture(int64_t rows, int64_t cols) {
    std::mt19937 rng(static_cast<uint32_t>(rows * 31 + cols));
    codes.resize(static_cast<size_t>(rows * cols / 2));
    for (auto& b : codes) b = static_cast<uint8_t>(rng());
    scales.resize(static_cast<size_t>(rows * cols / kNvfp4GroupSize));
    std::uniform_int_distribution<int> scale_code(0x01, 0x7E);  // positive, finite E4M3
    for (auto& s : scales) s = static_cast<uint8_t>(scale_code(rng));
    m = Nvfp4Matrix{codes.data(), scales.data(), rows, cols, 0.0123f};
  }
};

class Nvfp4Test : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(Nvfp4Test, SimdMatchesScalarAndDequantizedRows) {
  const auto [rows, cols] = GetParam();
  Nvfp4Fixture f(rows, cols);
  std::mt19937 rng(3);
  const std::vector<float> x = testing::random_activations(rng, cols);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    nvfp4_dequantize_row(f.m, r, row.data());
    double exact = 0.0, magnitude = 0.0;
    for (int64_t k = 0; k < cols; ++k) {
      exact += static_cast<double>(row[k]) * x[k];
      magnitude += std::fabs(static_cast<double>(row[k]) * x[k]);
    }
    const float tol = static_cast<float>(1e-5 * magnitude + 1e-30);
    EXPECT_NEAR(ref::nvfp4_row_dot(f.m, r, x.data()), exact, tol) << "row " << r;
    EXPECT_NEAR(nvfp4_row_dot(f.m, r, x.data()), exact, tol) << "row " << r << " (dispatched)";
  }
}

TEST_P(Nvfp4Test, BatchAndThreadInvariant) {
  const auto [rows, cols] = GetParam();
  Nvfp4Fixture f(rows, cols);
  std::mt19937 rng(5);
  constexpr int64_t T = 67;
  const std::vector<float> x = testing::random_activations(rng, T * cols);
  ThreadPool one(1), two(2);
  std::vector<float> batch(static_cast<size_t>(T * rows)), batch2(batch.size()), single(static_cast<size_t>(rows));
  nvfp4_matmul(f.m, x.data(), T, batch.data(), one);
  nvfp4_matmul(f.m, x.data(), T, batch2.data(), two);
  EXPECT_EQ(batch, batch2);
  for (int64_t t = 0; t < T; ++t) {  // every token: each sits at its own place in the 3-token tiles
    nvfp4_matmul(f.m, x.data() + t * cols, 1, single.data(), two);
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(single[r], batch[t * rows + r]) << "t " << t << " r " << r;
  }
}

// With AVX2 the product is bit for bit fp_gemm.h's chained dot of the dequantized rows.
TEST_P(Nvfp4Test, SimdMatmulIsTheChainedDotOfDequantizedRows) {
  if (!use_avx2()) GTEST_SKIP() << "no AVX2";
  const auto [rows, cols] = GetParam();
  Nvfp4Fixture f(rows, cols);
  std::mt19937 rng(9);
  constexpr int64_t T = 70;
  const std::vector<float> x = testing::random_activations(rng, T * cols);
  ThreadPool two(2);
  std::vector<float> y(static_cast<size_t>(T * rows)), row(static_cast<size_t>(cols));
  nvfp4_matmul(f.m, x.data(), T, y.data(), two);
  for (int64_t r = 0; r < rows; ++r) {
    nvfp4_dequantize_row(f.m, r, row.data());
    for (int64_t t = 0; t < T; ++t)
      ASSERT_EQ(testing::fp_gemm_order_dot(row.data(), x.data() + t * cols, cols), y[t * rows + r])
          << "r " << r << " t " << t;
  }
}

TEST(Nvfp4Decode, LowNibbleIsTheEvenElement) {
  const uint8_t codes[8] = {0x71, 0, 0, 0, 0, 0, 0, 0};  // element 0: code 1 (0.5), element 1: code 7 (6)
  const uint8_t scale[1] = {0x38};                         // e4m3 1.0
  const Nvfp4Matrix m{codes, scale, 1, 16, 2.0f};
  float row[16];
  nvfp4_dequantize_row(m, 0, row);
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[1], 12.0f);
  EXPECT_EQ(row[2], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Nvfp4Test,
                         ::testing::Values(std::pair<int64_t, int64_t>{1, 16}, std::pair<int64_t, int64_t>{7, 48},
                                           std::pair<int64_t, int64_t>{33, 144}, std::pair<int64_t, int64_t>{130, 208},
                                           std::pair<int64_t, int64_t>{257, 528},
                                           std::pair<int64_t, int64_t>{37, 1040}));

}  // namespace
}  // namespace zen::kernels
