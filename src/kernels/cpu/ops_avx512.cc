// AVX-512 versions of the attention block ops (ops.h): 32 registers of 16 floats hold a 4 x 4
// tile of dots or a 4-row x 64-column tile of accumulators, where AVX2's 16 registers leave the
// loops waiting on loads. Everything carries ZEN_TARGET_AVX512 and runs only after ops.cc's
// dispatch checked the CPU. GCC 12's 512-bit intrinsics start from _mm512_undefined registers
// that -Wmaybe-uninitialized reports once inlined (a false positive), so that one warning is
// off for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>

#include <algorithm>
#include <array>

#include "kernels/cpu/ops_avx512.h"

#define ZEN_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))

namespace zen::kernels::avx512 {
namespace {

// [a's 256-bit halves added | b's]: each dot's lane i + lane i + 8.
ZEN_TARGET_AVX512 inline __m512 fold_pair(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Four dots' 16-lane sums -> 128-bit lane L holding dot L's four partial sums.
ZEN_TARGET_AVX512 inline __m512 fold_four(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = fold_pair(a, b), cd = fold_pair(c, d);
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
}

// u[m] from fold_four -> element m of 128-bit lane L = the total of u[m]'s lane L, each summed
// (e0 + e2) + (e1 + e3). Every dot takes the same tree, whichever slot of the tile it is in.
ZEN_TARGET_AVX512 inline __m512 totals(__m512 u0, __m512 u1, __m512 u2, __m512 u3) {
  const __m512 w01 = _mm512_add_ps(_mm512_unpacklo_ps(u0, u1), _mm512_unpackhi_ps(u0, u1));
  const __m512 w23 = _mm512_add_ps(_mm512_unpacklo_ps(u2, u3), _mm512_unpackhi_ps(u2, u3));
  const __m512d a = _mm512_castps_pd(w01), b = _mm512_castps_pd(w23);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}

// Four query rows against four key rows: one accumulator per dot over steps of 16 (16
// independent FMA chains; each load serves four FMAs), the trees above, then the scalar tail.
// out [4, 4]: row r's dot with key j at out[4 r + j].
ZEN_TARGET_AVX512 inline void dot_4x4(const float* const* q, const float* const* k, int64_t n, float* out) {
  __m512 acc[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  const int64_t wide = n / 16 * 16;
  for (int64_t i = 0; i < wide; i += 16) {
    const __m512 k0 = _mm512_loadu_ps(k[0] + i), k1 = _mm512_loadu_ps(k[1] + i);
    const __m512 k2 = _mm512_loadu_ps(k[2] + i), k3 = _mm512_loadu_ps(k[3] + i);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512 qv = _mm512_loadu_ps(q[r] + i);
      acc[r][0] = _mm512_fmadd_ps(qv, k0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(qv, k1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(qv, k2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(qv, k3, acc[r][3]);
    }
  }
  __m512 u[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) u[j] = fold_four(acc[0][j], acc[1][j], acc[2][j], acc[3][j]);
  _mm512_storeu_ps(out, totals(u[0], u[1], u[2], u[3]));
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 4; ++j)
      for (int64_t i = wide; i < n; ++i) out[4 * r + j] += q[r][i] * k[j][i];
}

// Rows 4 at a time over 64 columns (16 accumulators), every element one FMA per key in order:
// exactly axpy_f32's steps.
template <int R, int C>
ZEN_TARGET_AVX512 inline void axpy_tile(const float* const* p, const float* v, int64_t v_stride, int64_t count,
                                        float* const* acc) {
  __m512 a[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) a[r][c] = _mm512_loadu_ps(acc[r] + 16 * c);
  for (int64_t j = 0; j < count; ++j) {
    __m512 vj[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) vj[c] = _mm512_loadu_ps(v + j * v_stride + 16 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 pr = _mm512_set1_ps(p[r][j]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_ps(pr, vj[c], a[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc[r] + 16 * c, a[r][c]);
}

}  // namespace

// Rows and keys past the ends are computed on copies of the last live ones and not stored, so
// every dot takes the same path whatever n_q and count.
ZEN_TARGET_AVX512 void dot_tile_f32(const float* const* q, int64_t n_q, const float* k, int64_t k_stride, int64_t count,
                                    int64_t n, float scale, float* out, int64_t out_stride) {
  for (int64_t r0 = 0; r0 < n_q; r0 += 4) {
    const int64_t live_rows = std::min<int64_t>(4, n_q - r0);
    const float* rows[4];
    for (int64_t r = 0; r < 4; ++r) rows[r] = q[r0 + std::min(r, live_rows - 1)];
    for (int64_t j0 = 0; j0 < count; j0 += 4) {
      const int64_t live_keys = std::min<int64_t>(4, count - j0);
      const float* keys[4];
      for (int64_t j = 0; j < 4; ++j) keys[j] = k + (j0 + std::min(j, live_keys - 1)) * k_stride;
      alignas(64) float d[16];
      dot_4x4(rows, keys, n, d);
      for (int64_t r = 0; r < live_rows; ++r)
        for (int64_t j = 0; j < live_keys; ++j) out[(r0 + r) * out_stride + j0 + j] = d[4 * r + j] * scale;
    }
  }
}

ZEN_TARGET_AVX512 void axpy_rows_f32(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t count,
                                     int64_t n, float* acc, int64_t acc_stride, int64_t n_acc) {
  const int64_t wide = n / 16 * 16;
  for (int64_t r0 = 0; r0 < n_acc; r0 += 4) {
    const int64_t rows = std::min<int64_t>(4, n_acc - r0);
    const float* pr[4];
    float* ar[4];
    for (int64_t r = 0; r < rows; ++r) {
      pr[r] = p + (r0 + r) * p_stride;
      ar[r] = acc + (r0 + r) * acc_stride;
    }
    auto shift = [&](int64_t i) {
      float* moved[4];
      for (int64_t r = 0; r < rows; ++r) moved[r] = ar[r] + i;
      return std::to_array(moved);
    };
    int64_t i = 0;
    for (; i + 64 <= wide; i += 64) {
      const auto a = shift(i);
      if (rows == 4) {
        axpy_tile<4, 4>(pr, v + i, v_stride, count, a.data());
      } else {
        for (int64_t r = 0; r < rows; ++r) axpy_tile<1, 4>(&pr[r], v + i, v_stride, count, &a[static_cast<size_t>(r)]);
      }
    }
    for (; i < wide; i += 16) {
      const auto a = shift(i);
      if (rows == 4) {
        axpy_tile<4, 1>(pr, v + i, v_stride, count, a.data());
      } else {
        for (int64_t r = 0; r < rows; ++r) axpy_tile<1, 1>(&pr[r], v + i, v_stride, count, &a[static_cast<size_t>(r)]);
      }
    }
    // What is left as axpy_f32 leaves it: a chunk of 8 by FMA, then mul and add one by one.
    const int64_t eights = n / 8 * 8;
    for (int64_t r = 0; r < rows; ++r) {
      if (wide < eights) {
        __m256 a = _mm256_loadu_ps(ar[r] + wide);
        for (int64_t j = 0; j < count; ++j)
          a = _mm256_fmadd_ps(_mm256_set1_ps(pr[r][j]), _mm256_loadu_ps(v + j * v_stride + wide), a);
        _mm256_storeu_ps(ar[r] + wide, a);
      }
      for (int64_t c = eights; c < n; ++c)
        for (int64_t j = 0; j < count; ++j) ar[r][c] += pr[r][j] * v[j * v_stride + c];
    }
  }
}

}  // namespace zen::kernels::avx512

#endif  // ZEN_HAVE_X86_SIMD
