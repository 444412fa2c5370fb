#include "kernels/cpu/gemm_f32.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/quant.h"
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_NEON
#include <arm_neon.h>
#endif

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

void pack_b_f32(int64_t K, int64_t N, const float* B, int64_t ldb, float* packed) {
  for (int64_t j = 0; j < N; j += kGemmPanel) {
    const int64_t cols = std::min(kGemmPanel, N - j);
    float* panel = packed + j * K;  // panel j / 16 starts at (j / 16) * 16 * K
    for (int64_t k = 0; k < K; ++k) {
      std::memcpy(panel + k * kGemmPanel, B + k * ldb + j, static_cast<size_t>(cols) * sizeof(float));
      std::fill(panel + k * kGemmPanel + cols, panel + (k + 1) * kGemmPanel, 0.0f);
    }
  }
}

void unpack_b_f32(int64_t K, int64_t N, const float* packed, float* B, int64_t ldb) {
  for (int64_t j = 0; j < N; j += kGemmPanel) {
    const int64_t cols = std::min(kGemmPanel, N - j);
    const float* panel = packed + j * K;
    for (int64_t k = 0; k < K; ++k)
      std::memcpy(B + k * ldb + j, panel + k * kGemmPanel, static_cast<size_t>(cols) * sizeof(float));
  }
}

namespace {

// Rows [0, M) of the panel in 6-row tiles, then one tile of the rest: tile.template
// operator()<R>(i) computes rows i .. i + R - 1.
template <typename Tile>
ZEN_TARGET_AVX2 inline void for_row_tiles(int64_t M, const Tile& tile) {
  int64_t i = 0;
  for (; i + 6 <= M; i += 6) tile.template operator()<6>(i);
  switch (M - i) {
    case 5: return tile.template operator()<5>(i);
    case 4: return tile.template operator()<4>(i);
    case 3: return tile.template operator()<3>(i);
    case 2: return tile.template operator()<2>(i);
    case 1: return tile.template operator()<1>(i);
    default: return;
  }
}

// The scalar form of gemm_f32_packed: ref::gemm_f32's sums, reading the panels.
void gemm_packed_scalar(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* Bp,
                        int64_t panel_rows, float* C, int64_t ldc, float beta, const float* row_beta) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float* b = Bp + (j / kGemmPanel) * kGemmPanel * panel_rows + j % kGemmPanel;
      const float scale = row_beta != nullptr ? row_beta[i] : beta;
      float acc = row_beta == nullptr && beta == 0.0f ? 0.0f : C[i * ldc + j] * scale;
      for (int64_t k = 0; k < K; ++k) acc += A[i * lda + k] * b[k * kGemmPanel];
      C[i * ldc + j] = acc;
    }
}

void unit_lower_inverse_scalar(int64_t n, float* a, int64_t lda) {
  const int64_t width = (n + 15) / 16 * 16;
  for (int64_t i = 0; i < n; ++i) {
    float* row = a + i * lda;
    std::fill(row + i, row + width, 0.0f);
    for (int64_t m = 1; m < i; ++m) {
      const float coef = row[m];  // still N_im: earlier steps only touch columns < m
      const float* tm = a + m * lda;
      for (int64_t c = 0; c < m; ++c) row[c] += coef * tm[c];
    }
  }
  for (int64_t i = 0; i < n; ++i) a[i * lda + i] = 1.0f;
}

#if ZEN_HAVE_X86_SIMD

// kRows (1..6) rows x one panel: 2 * kRows accumulators, two panel loads per k. kFull: all 16
// columns are stored; else only the lanes of mask0/mask1 (masked loads and stores of C).
template <int kRows, bool kFull>
ZEN_TARGET_AVX2 void tile(int64_t K, const float* A, int64_t lda, const float* panel, float* C, int64_t ldc, float beta,
                          const float* row_beta, __m256i mask0, __m256i mask1) {
  __m256 acc[kRows][2];
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    const __m256 scale = _mm256_set1_ps(row_beta != nullptr ? row_beta[r] : beta);
    if (row_beta == nullptr && beta == 0.0f) {
      acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    } else if (kFull) {
      acc[r][0] = _mm256_mul_ps(_mm256_loadu_ps(C + r * ldc), scale);
      acc[r][1] = _mm256_mul_ps(_mm256_loadu_ps(C + r * ldc + 8), scale);
    } else {
      acc[r][0] = _mm256_mul_ps(_mm256_maskload_ps(C + r * ldc, mask0), scale);
      acc[r][1] = _mm256_mul_ps(_mm256_maskload_ps(C + r * ldc + 8, mask1), scale);
    }
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_loadu_ps(panel + k * kGemmPanel), b1 = _mm256_loadu_ps(panel + k * kGemmPanel + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    if (kFull) {
      _mm256_storeu_ps(C + r * ldc, acc[r][0]);
      _mm256_storeu_ps(C + r * ldc + 8, acc[r][1]);
    } else {
      _mm256_maskstore_ps(C + r * ldc, mask0, acc[r][0]);
      _mm256_maskstore_ps(C + r * ldc + 8, mask1, acc[r][1]);
    }
  }
}

// All M rows against one panel.
template <bool kFull>
ZEN_TARGET_AVX2 void panel_rows_avx2(int64_t M, int64_t K, const float* A, int64_t lda, const float* panel, float* C,
                                     int64_t ldc, float beta, const float* row_beta, __m256i m0, __m256i m1) {
  for_row_tiles(M, [&]<int R>(int64_t i) ZEN_TARGET_AVX2 {
    tile<R, kFull>(K, A + i * lda, lda, panel, C + i * ldc, ldc, beta, row_beta != nullptr ? row_beta + i : nullptr,
                   m0, m1);
  });
}

ZEN_TARGET_AVX2 void gemm_packed_avx2(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* Bp,
                                      int64_t panel_rows, float* C, int64_t ldc, float beta, const float* row_beta) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t j = 0; j < N; j += kGemmPanel) {
    const float* panel = Bp + j * panel_rows;
    const int64_t cols = std::min(kGemmPanel, N - j);
    if (cols == kGemmPanel) {
      panel_rows_avx2<true>(M, K, A, lda, panel, C + j, ldc, beta, row_beta, lane, lane);
    } else {
      const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols)), lane);
      const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols - 8)), lane);
      panel_rows_avx2<false>(M, K, A, lda, panel, C + j, ldc, beta, row_beta, m0, m1);
    }
  }
}

// Row i by 16-column blocks held in two registers: N_i's block plus N_im T_m's block for the m
// that reach it (T_m is zero from column m on), in m order; N_im is read before the block is
// stored, so it is still N's.
ZEN_TARGET_AVX2 void unit_lower_inverse_avx2(int64_t n, float* a, int64_t lda) {
  const int64_t width = (n + 15) / 16 * 16;
  for (int64_t i = 0; i < n; ++i) {
    float* row = a + i * lda;
    std::fill(row + i, row + width, 0.0f);
    for (int64_t cb = 0; cb < i; cb += 16) {
      __m256 acc0 = _mm256_loadu_ps(row + cb), acc1 = _mm256_loadu_ps(row + cb + 8);
      for (int64_t m = std::max<int64_t>(cb + 1, 1); m < i; ++m) {
        const __m256 coef = _mm256_set1_ps(row[m]);
        const float* tm = a + m * lda + cb;
        acc0 = _mm256_fmadd_ps(coef, _mm256_loadu_ps(tm), acc0);
        acc1 = _mm256_fmadd_ps(coef, _mm256_loadu_ps(tm + 8), acc1);
      }
      _mm256_storeu_ps(row + cb, acc0);
      _mm256_storeu_ps(row + cb + 8, acc1);
    }
  }
  for (int64_t i = 0; i < n; ++i) a[i * lda + i] = 1.0f;
}

ZEN_TARGET_AVX2 void axpby_avx2(float a, const float* x, float b, const float* y, int64_t n, float* out) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_mul_ps(vb, _mm256_loadu_ps(y + i))));
  for (; i < n; ++i) out[i] = __builtin_fmaf(a, x[i], b * y[i]);
}

ZEN_TARGET_AVX2 void scale_avx2(float s, const float* x, int64_t n, float* out) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(vs, _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) out[i] = s * x[i];
}

ZEN_TARGET_AVX2 void mul_avx2(const float* x, const float* y, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) out[i] = x[i] * y[i];
}

#endif

#if ZEN_HAVE_NEON

// kRows (1..6) rows x one panel in 4 * kRows accumulators (of NEON's 32 registers), one FMA
// by element per row and 4 columns; the same per-element order as the AVX2 tile. A partial
// panel (cols < 16) is computed whole, its padding columns being zero, and stored in part.
template <int kRows>
void tile_neon(int64_t K, const float* A, int64_t lda, const float* panel, float* C, int64_t ldc, float beta,
               const float* row_beta, int64_t cols) {
  float32x4_t acc[kRows][4];
  alignas(16) float c_rows[kRows][kGemmPanel];
  for (int r = 0; r < kRows; ++r) {
    const float scale = row_beta != nullptr ? row_beta[r] : beta;
    const bool read = !(row_beta == nullptr && beta == 0.0f);
    std::fill(c_rows[r], c_rows[r] + kGemmPanel, 0.0f);
    if (read) std::copy(C + r * ldc, C + r * ldc + cols, c_rows[r]);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q)
      acc[r][q] = read ? vmulq_n_f32(vld1q_f32(c_rows[r] + 4 * q), scale) : vdupq_n_f32(0.0f);
  }
#pragma GCC unroll 2
  for (int64_t k = 0; k < K; ++k) {
    const float* b = panel + k * kGemmPanel;
    const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const float a = A[r * lda + k];
      acc[r][0] = vfmaq_n_f32(acc[r][0], b0, a);
      acc[r][1] = vfmaq_n_f32(acc[r][1], b1, a);
      acc[r][2] = vfmaq_n_f32(acc[r][2], b2, a);
      acc[r][3] = vfmaq_n_f32(acc[r][3], b3, a);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    if (cols == kGemmPanel) {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) vst1q_f32(C + r * ldc + 4 * q, acc[r][q]);
    } else {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) vst1q_f32(c_rows[r] + 4 * q, acc[r][q]);
      std::copy(c_rows[r], c_rows[r] + cols, C + r * ldc);
    }
  }
}

void gemm_packed_neon(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* Bp,
                      int64_t panel_rows, float* C, int64_t ldc, float beta, const float* row_beta) {
  for (int64_t j = 0; j < N; j += kGemmPanel) {
    const float* panel = Bp + j * panel_rows;
    const int64_t cols = std::min(kGemmPanel, N - j);
    for_row_tiles(M, [&]<int R>(int64_t i) {
      tile_neon<R>(K, A + i * lda, lda, panel, C + i * ldc + j, ldc, beta, row_beta != nullptr ? row_beta + i : nullptr,
                   cols);
    });
  }
}

#endif

}  // namespace

void gemm_f32_packed(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* Bp,
                     int64_t panel_rows, float* C, int64_t ldc, float beta, const float* row_beta) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return gemm_packed_avx2(M, N, K, A, lda, Bp, panel_rows, C, ldc, beta, row_beta);
#elif ZEN_HAVE_NEON
  if (use_neon()) return gemm_packed_neon(M, N, K, A, lda, Bp, panel_rows, C, ldc, beta, row_beta);
#endif
  gemm_packed_scalar(M, N, K, A, lda, Bp, panel_rows, C, ldc, beta, row_beta);
}

void gemm_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
              int64_t ldc, bool accumulate) {
  if (use_avx2() || use_neon()) {
    thread_local std::vector<float> packed;
    packed.resize(static_cast<size_t>(packed_b_floats(K, N)));
    pack_b_f32(K, N, B, ldb, packed.data());
    return gemm_f32_packed(M, N, K, A, lda, packed.data(), K, C, ldc, accumulate ? 1.0f : 0.0f);
  }
  ref::gemm_f32(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

void unit_lower_inverse_f32(int64_t n, float* a, int64_t lda) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return unit_lower_inverse_avx2(n, a, lda);
#endif
  unit_lower_inverse_scalar(n, a, lda);
}

void scale_f32(float s, const float* x, int64_t n, float* out) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return scale_avx2(s, x, n, out);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = s * x[i];
}

void axpby_f32(float a, const float* x, float b, const float* y, int64_t n, float* out) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return axpby_avx2(a, x, b, y, n, out);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = a * x[i] + b * y[i];
}

void mul_f32(const float* x, const float* y, int64_t n, float* out) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return mul_avx2(x, y, n, out);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * y[i];
}

}  // namespace zen::kernels
