// Small dense f32 matrix products for the chunked delta rule (blocks of 64 x 128): row-major
// C[M, N] (+)= A[M, K] B[K, N] with leading dimensions. The AVX2 path register-tiles 6 rows x
// 16 columns (the two B row loads serve twelve FMAs) and handles edges one element at a time.
// Deterministic: an element's sum runs over k in order, independent of M and N. A scalar
// reference lives in namespace ref.
#pragma once
#include <cstdint>

namespace zen::kernels {

// accumulate: C += A B, else C = A B.
void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, bool accumulate);

namespace ref {
void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, bool accumulate);
}  // namespace ref

}  // namespace zen::kernels
