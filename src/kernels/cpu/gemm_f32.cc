#include "kernels/cpu/gemm_f32.h"

#include "kernels/cpu/quant.h"
#include "kernels/cpu/simd.h"

namespace zen::kernels {

namespace ref {

void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = accumulate ? C[i * ldc + j] : 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += A[i * lda + k] * B[k * ldb + j];
      C[i * ldc + j] = acc;
    }
}

}  // namespace ref

#if ZEN_HAVE_X86_SIMD
namespace {

// rows (1..6) x 16 columns: 2 * rows accumulators, two B loads per k.
template <int kRows>
ZEN_TARGET_AVX2 void tile(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                          bool accumulate) {
  __m256 acc[kRows][2];
  for (int r = 0; r < kRows; ++r) {
    acc[r][0] = accumulate ? _mm256_loadu_ps(C + r * ldc) : _mm256_setzero_ps();
    acc[r][1] = accumulate ? _mm256_loadu_ps(C + r * ldc + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_loadu_ps(B + k * ldb), b1 = _mm256_loadu_ps(B + k * ldb + 8);
    for (int r = 0; r < kRows; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    _mm256_storeu_ps(C + r * ldc, acc[r][0]);
    _mm256_storeu_ps(C + r * ldc + 8, acc[r][1]);
  }
}

// One element with FMAs in k order, as the tiles compute theirs.
ZEN_TARGET_AVX2 float element(int64_t K, const float* a, const float* b, int64_t ldb, float init) {
  float acc = init;
  for (int64_t k = 0; k < K; ++k) acc = __builtin_fmaf(a[k], b[k * ldb], acc);
  return acc;
}

ZEN_TARGET_AVX2 void gemm_avx2(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                               int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  const int64_t N16 = N / 16 * 16;
  for (int64_t j = 0; j < N16; j += 16) {
    int64_t i = 0;
    for (; i + 6 <= M; i += 6) tile<6>(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc, accumulate);
    for (; i + 4 <= M; i += 4) tile<4>(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc, accumulate);
    for (; i < M; ++i) tile<1>(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc, accumulate);
  }
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = N16; j < N; ++j)
      C[i * ldc + j] = element(K, A + i * lda, B + j, ldb, accumulate ? C[i * ldc + j] : 0.0f);
}

}  // namespace
#endif

void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, bool accumulate) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return gemm_avx2(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
#endif
  ref::gemm_f32(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

}  // namespace zen::kernels
