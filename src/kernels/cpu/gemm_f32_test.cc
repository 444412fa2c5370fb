// gemm_f32 / gemm_f32_packed (AVX2 or NEON tiles, partial panels) against the scalar reference
// on odd sizes and strides, and the chunk's small helpers (packing, the triangular inverse).
#include "kernels/cpu/gemm_f32.h"

#include <gtest/gtest.h>

#include <cmath>
#include <array>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kernels_test_util.h"

namespace zen::kernels {
namespace {

struct GemmCase {
  int64_t M, N, K;
};

class GemmF32 : public ::testing::TestWithParam<GemmCase> {};

// fast [M, ldc] within f32 rounding of slow in the first N columns, and untouched (= C0) past them.
void expect_close(const std::vector<float>& fast, const std::vector<float>& slow, const std::vector<float>& C0,
                  int64_t M, int64_t N, int64_t K, int64_t ldc, const std::string& what) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= N) {
        EXPECT_EQ(fast[at], C0[at]) << "wrote past column N";
        continue;
      }
      EXPECT_NEAR(fast[at], slow[at], 1e-5f * static_cast<float>(K) + 1e-5f * std::fabs(slow[at]))
          << "(" << i << ", " << j << ") " << what;
    }
}

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
    expect_close(fast, slow, C0, M, N, K, ldc, "accumulate " + std::to_string(accumulate));
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

// gemm_f32_packed on panels packed from a taller matrix (panel_rows > K), with beta 0, 1, a
// scale and per-row scales, against the reference on the same sums.
TEST_P(GemmF32, PackedMatchesReference) {
  const auto [M, N, K] = GetParam();
  const int64_t lda = K + 3, ldb = N + 5, ldc = N + 2, rows = K + 4;
  std::mt19937 rng(static_cast<uint32_t>(M * 31 + N * 17 + K));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> A(static_cast<size_t>(M * lda)), B(static_cast<size_t>(rows * ldb)),
      C0(static_cast<size_t>(M * ldc));
  for (float& x : A) x = normal(rng);
  for (float& x : B) x = normal(rng);
  for (float& x : C0) x = normal(rng);
  std::vector<float> packed(static_cast<size_t>(packed_b_floats(rows, N)));
  pack_b_f32(rows, N, B.data(), ldb, packed.data());
  std::vector<float> row_beta(static_cast<size_t>(M));
  for (float& x : row_beta) x = normal(rng);
  for (int variant = 0; variant < 8; ++variant) {  // beta 0, 1, 0.75, per-row; AVX2 then scalar
    std::optional<testing::ScalarOnly> scalar;
    if (variant >= 4) scalar.emplace();
    const float beta = std::array{0.0f, 1.0f, 0.75f, -1.0f}[variant % 4];
    const bool per_row = beta < 0.0f;
    std::vector<float> fast = C0, slow = C0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        slow[static_cast<size_t>(i * ldc + j)] *= per_row ? row_beta[static_cast<size_t>(i)] : beta;
    gemm_f32_packed(M, N, K, A.data(), lda, packed.data(), rows, fast.data(), ldc, beta,
                    per_row ? row_beta.data() : nullptr);
    ref::gemm_f32(M, N, K, A.data(), lda, B.data(), ldb, slow.data(), ldc, /*accumulate=*/true);
    expect_close(fast, slow, C0, M, N, K, ldc, "beta " + std::to_string(beta));
  }
}

// The panels hold B's columns (zero past N), and unpacking restores B.
TEST(GemmF32Pack, RoundTrip) {
  const int64_t K = 5, N = 37, ldb = 40;
  std::vector<float> B(static_cast<size_t>(K * ldb));
  for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(i) + 0.5f;
  std::vector<float> packed(static_cast<size_t>(packed_b_floats(K, N)), -1.0f);
  pack_b_f32(K, N, B.data(), ldb, packed.data());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < packed_b_floats(1, N); ++j) {
      const float want = j < N ? B[static_cast<size_t>(k * ldb + j)] : 0.0f;
      EXPECT_EQ(packed[static_cast<size_t>((j / kGemmPanel) * kGemmPanel * K + k * kGemmPanel + j % kGemmPanel)], want);
    }
  std::vector<float> back(B.size(), 0.0f);
  unpack_b_f32(K, N, packed.data(), back.data(), ldb);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < ldb; ++j)
      EXPECT_EQ(back[static_cast<size_t>(k * ldb + j)], j < N ? B[static_cast<size_t>(k * ldb + j)] : 0.0f);
}

// (I - N) T = I for the inverse of I minus a strictly lower-triangular N (checked in double),
// T is unit lower-triangular, and the padding columns are zero.
TEST(UnitLowerInverse, InvertsIMinusN) {
  for (int64_t signed_n : {1, 2, 7, 16, 17, 33, 64, -33}) {  // -33: 33 on the scalar path
    std::optional<testing::ScalarOnly> scalar;
    if (signed_n < 0) scalar.emplace();
    const int64_t n = signed_n < 0 ? -signed_n : signed_n;
    const int64_t lda = 80;
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> normal(0.0f, 0.2f);
    std::vector<float> A(static_cast<size_t>(n * lda));
    for (float& x : A) x = normal(rng);  // the diagonal and above are ignored
    std::vector<float> T = A;
    unit_lower_inverse_f32(n, T.data(), lda);
    const int64_t width = (n + 15) / 16 * 16;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i + 1; j < width; ++j) EXPECT_EQ(T[static_cast<size_t>(i * lda + j)], 0.0f);
      EXPECT_EQ(T[static_cast<size_t>(i * lda + i)], 1.0f);
      for (int64_t j = 0; j < n; ++j) {
        double sum = T[static_cast<size_t>(i * lda + j)];  // the identity's term
        for (int64_t m = 0; m < i; ++m)
          sum -= static_cast<double>(A[static_cast<size_t>(i * lda + m)]) * T[static_cast<size_t>(m * lda + j)];
        EXPECT_NEAR(sum, i == j ? 1.0 : 0.0, 1e-5) << "n " << n << " (" << i << ", " << j << ")";
      }
    }
  }
}

class GemmF32Elementwise : public ::testing::TestWithParam<bool> {};

TEST_P(GemmF32Elementwise, ScaleAxpbyMul) {
  std::optional<testing::ScalarOnly> scalar;
  if (!GetParam()) scalar.emplace();
  const int64_t n = 21;  // vector body and scalar tail
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n)), y(x.size()), out(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng), y[i] = normal(rng);
  scale_f32(1.5f, x.data(), n, out.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(out[i], 1.5f * x[i]);
  mul_f32(x.data(), y.data(), n, out.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(out[i], x[i] * y[i]);
  axpby_f32(0.3f, x.data(), -2.0f, y.data(), n, out.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], 0.3f * x[i] - 2.0f * y[i], 1e-6f);
}

INSTANTIATE_TEST_SUITE_P(SimdAndScalar, GemmF32Elementwise, ::testing::Bool());

INSTANTIATE_TEST_SUITE_P(Shapes, GemmF32,
                         ::testing::Values(GemmCase{1, 1, 1}, GemmCase{4, 16, 8}, GemmCase{5, 17, 3},
                                           GemmCase{64, 128, 128}, GemmCase{63, 33, 64}, GemmCase{3, 15, 7},
                                           GemmCase{128, 8, 16}, GemmCase{13, 40, 1},
                                           GemmCase{7, 16, 64}));

}  // namespace
}  // namespace zen::kernels
