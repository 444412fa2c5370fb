// Small dense f32 matrix products for the chunked delta rule (blocks of 64 x 128): row-major
// C[M, N] (+)= A[M, K] B[K, N] with leading dimensions.
// B is first packed into 16-column panels (each [K, 16], contiguous, the last one zero-padded):
// a panel's rows are then consecutive 64-byte lines, so a panel stays in L1 while every row
// block of A runs over it (a row-major B with a 512-byte stride maps its rows to a few cache
// sets and misses). The AVX2 path register-tiles 6 rows x 16 columns (two panel loads serve
// twelve FMAs; the row loops are unrolled by pragma so the twelve accumulators stay in
// registers: left to itself GCC kept them on the stack, a load and a store per FMA, a third of
// the speed); partial panels are masked. The NEON path (aarch64) tiles the same 6 x 16 in 24 of
// its 32 registers. Deterministic: an element's sum runs over k in order
// with one FMA per step, independent of M, N and the tile that computes it. A scalar reference
// lives in namespace ref.
#pragma once
#include <cstdint>

namespace zen::kernels {

inline constexpr int64_t kGemmPanel = 16;  // columns per packed panel

// Floats of B [K, N] packed: ceil(N / 16) panels of [K, 16].
inline int64_t packed_b_floats(int64_t K, int64_t N) { return (N + kGemmPanel - 1) / kGemmPanel * kGemmPanel * K; }

// packed <- B [K, N] (leading dimension ldb) as panels of [K, 16]; columns past N are zero.
void pack_b_f32(int64_t K, int64_t N, const float* B, int64_t ldb, float* packed);

// B [K, N] <- packed (the inverse of pack_b_f32).
void unpack_b_f32(int64_t K, int64_t N, const float* packed, float* B, int64_t ldb);

// C[M, N] = A[M, K] Bp + beta C, where Bp holds panels of [panel_rows, 16] (packed from a
// matrix of panel_rows >= K rows) and the product uses their first K rows. beta 0: C is not
// read; beta 1: C is accumulated into exactly. With row_beta, row i takes row_beta[i] for beta
// (C is read).
void gemm_f32_packed(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* Bp,
                     int64_t panel_rows, float* C, int64_t ldc, float beta, const float* row_beta = nullptr);

// a [n, lda]: holds a strictly lower-triangular N (read below the diagonal only); overwritten
// with (I - N)^-1 (unit lower-triangular, zeros above the diagonal), by forward substitution
// row by row: T_i = N_i + sum_{m<i} N_im T_m (T without its diagonal), as transformers'
// chunked delta rule inverts. The rows are padded: lda >= round_up(n, 16) and columns
// [n, round_up(n, 16)) are zeroed too.
void unit_lower_inverse_f32(int64_t n, float* a, int64_t lda);

// Elementwise helpers of the chunk: out = s x; out = a x + b y; out = x y (out may alias).
void scale_f32(float s, const float* x, int64_t n, float* out);
void axpby_f32(float a, const float* x, float b, const float* y, int64_t n, float* out);
void mul_f32(const float* x, const float* y, int64_t n, float* out);

// accumulate: C += A B, else C = A B. Packs B into a per-thread buffer, then gemm_f32_packed.
void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, bool accumulate);

namespace ref {
void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, bool accumulate);
}  // namespace ref

}  // namespace zen::kernels
