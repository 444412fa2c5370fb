// gemm_f32 (AVX2 tiles + edges) against the scalar reference on odd sizes and strides.
#include "kernels/cpu/gemm_f32.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace zen::kernels {
namespace {

struct GemmCase {
  int64_t M, N, K;
};

class GemmF32 : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmF32, MatchesReference) {
  const auto [M, N, K] = GetParam();
  const int64_t lda = K + 3, ldb = N + 5, ldc = N + 2;
  std::mt19937 rng(static_cast<uint32_t>(M * 131 + N * 7 + K));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> A(static_cast<size_t>(M * lda)), B(static_cast<size_t>(K * ldb)), C0(static_cast<size_t>(M * ldc));
  for (float& x : A) x = normal(rng);
  for (float& x : B) x = normal(rng);
  for (float& x : C0) x = normal(rng);
  for (bool accumulate : {false, true}) {
    std::vector<float> fast = C0, slow = C0;
    gemm_f32(M, N, K, A.data(), lda, B.data(), ldb, fast.data(), ldc, accumulate);
    ref::gemm_f32(M, N, K, A.data(), lda, B.data(), ldb, slow.data(), ldc, accumulate);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        const size_t at = static_cast<size_t>(i * ldc + j);
        if (j >= N) {
          EXPECT_EQ(fast[at], C0[at]) << "wrote past column N";
          continue;
        }
        EXPECT_NEAR(fast[at], slow[at], 1e-5f * static_cast<float>(K) + 1e-5f * std::fabs(slow[at]))
            << "(" << i << ", " << j << ") accumulate " << accumulate;
      }
  }
}

// A row's result does not depend on how many rows or columns share the call (4-row tiles,
// single rows and edge elements compute the same sums).
TEST(GemmF32Invariance, RowsAndColumnsIndependentOfShape) {
  const int64_t M = 7, N = 37, K = 29;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> A(static_cast<size_t>(M * K)), B(static_cast<size_t>(K * N));
  for (float& x : A) x = normal(rng);
  for (float& x : B) x = normal(rng);
  std::vector<float> all(static_cast<size_t>(M * N));
  gemm_f32(M, N, K, A.data(), K, B.data(), N, all.data(), N, false);
  for (int64_t i = 0; i < M; ++i) {
    std::vector<float> row(static_cast<size_t>(N));
    gemm_f32(1, N, K, A.data() + i * K, K, B.data(), N, row.data(), N, false);
    for (int64_t j = 0; j < N; ++j) EXPECT_EQ(row[static_cast<size_t>(j)], all[static_cast<size_t>(i * N + j)]);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmF32,
                         ::testing::Values(GemmCase{1, 1, 1}, GemmCase{4, 16, 8}, GemmCase{5, 17, 3},
                                           GemmCase{64, 128, 128}, GemmCase{63, 33, 64}, GemmCase{3, 15, 7},
                                           GemmCase{128, 8, 16}));

}  // namespace
}  // namespace zen::kernels
