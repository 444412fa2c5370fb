// AVX2+FMA versions of the f32 vector ops. Everything carries ZEN_TARGET_AVX2 and runs only
// after ops.cc's dispatch checked the CPU.
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/numeric.h"
#include "kernels/cpu/ops_avx2.h"

namespace zen::kernels::avx2 {
namespace {

ZEN_TARGET_AVX2 inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Adds the 8 floats of v, widened to f64, to acc.
ZEN_TARGET_AVX2 inline __m256d add_widened(__m256d acc, __m256 v) {
  acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

ZEN_TARGET_AVX2 inline __m256 pow2i(__m256i k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

// exp(x): x = n*ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact product), a degree-7
// polynomial for exp(r) (Cephes expf coefficients), times 2^n applied as two factors so that
// results near overflow and in the subnormal range come out right.
ZEN_TARGET_AVX2 inline __m256 exp256(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256 res = _mm256_mul_ps(_mm256_mul_ps(y, pow2i(n1)), pow2i(_mm256_sub_epi32(ni, n1)));
  return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN in, NaN out
}

ZEN_TARGET_AVX2 inline float exp1(float x) {
  return _mm256_cvtss_f32(exp256(_mm256_set1_ps(x)));
}

}  // namespace

ZEN_TARGET_AVX2 void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    acc0 = add_widened(acc0, _mm256_mul_ps(a, a));
    acc1 = add_widened(acc1, _mm256_mul_ps(b, b));
  }
  double sum = hsum(_mm256_add_pd(acc0, acc1));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  const __m256 s = _mm256_set1_ps(scale);
  i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
  for (; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

ZEN_TARGET_AVX2 void add_inplace(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

ZEN_TARGET_AVX2 void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, exp256(_mm256_xor_ps(g, sign))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + exp1(-gate[i])) * up[i];
}

// Two passes: the maximum (NaNs skipped: vmaxps returns its second operand, the running
// maximum, when the first is NaN), then the first index holding it.
ZEN_TARGET_AVX2 int64_t argmax_f32(const float* x, int64_t n) {
  if (std::isnan(x[0])) return 0;  // nothing compares greater than a leading NaN
  __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
  float best = lanes[0];
  for (int l = 1; l < 8; ++l) best = std::max(best, lanes[l]);
  for (; i < n; ++i)
    if (x[i] > best) best = x[i];
  const __m256 target = _mm256_set1_ps(best);
  for (i = 0; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), target, _CMP_EQ_OQ));
    if (mask != 0) return i + __builtin_ctz(static_cast<unsigned>(mask));
  }
  for (; i < n; ++i)
    if (x[i] == best) return i;
  return 0;  // unreachable: best is one of the elements
}

ZEN_TARGET_AVX2 float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

ZEN_TARGET_AVX2 void axpy_f32(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

ZEN_TARGET_AVX2 void softmax_inplace(float* x, int64_t n) {
  if (n <= 0) return;
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  float max = hmax(mv);
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  const __m256 m = _mm256_set1_ps(max);
  __m256d acc = _mm256_setzero_pd();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(x + i, e);
    acc = add_widened(acc, e);
  }
  double sum = hsum(acc);
  for (; i < n; ++i) {
    x[i] = exp1(x[i] - max);
    sum += x[i];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  const __m256 iv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), iv));
  for (; i < n; ++i) x[i] *= inv;
}

ZEN_TARGET_AVX2 void bf16_to_f32_row(const uint16_t* src, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(h, 16));
  }
  for (; i < n; ++i) out[i] = bf16_to_f32(src[i]);
}

ZEN_TARGET_AVX2 void exp_f32(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp256(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) out[i] = exp1(x[i]);
}

// Four 8-lane vectors -> their totals, each summed as hsum does: the halves added, then
// (x0 + x2) + (x1 + x3).
ZEN_TARGET_AVX2 inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m128 ha = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 hb = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
  const __m128 hc = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
  const __m128 hd = _mm_add_ps(_mm256_castps256_ps128(d), _mm256_extractf128_ps(d, 1));
  const __m128 ab = _mm_add_ps(_mm_unpacklo_ps(ha, hb), _mm_unpackhi_ps(ha, hb));  // a0+a2 b0+b2 a1+a3 b1+b3
  const __m128 cd = _mm_add_ps(_mm_unpacklo_ps(hc, hd), _mm_unpackhi_ps(hc, hd));
  return _mm_add_ps(_mm_movelh_ps(ab, cd), _mm_movehl_ps(cd, ab));
}

// Two of dot_f32's four accumulators, s[lane] + s[lane + 1] (lane 0 or 2), for the four dots of
// two query rows with two key rows, in the order out = {q0.k0, q1.k0, q0.k1, q1.k1}. Accumulator
// l sums elements 32t + 8l .. 32t + 8l + 7 of every whole step of 32, and accumulator 0 then the
// remaining 8-float chunks, as dot_f32 does. Eight independent FMA chains hide the latency.
ZEN_TARGET_AVX2 inline void dot_2x2_lanes(const float* q0, const float* q1, const float* k0, const float* k1, int64_t n,
                                          int64_t lane, __m256* out) {
  __m256 u0 = _mm256_setzero_ps(), u1 = u0, u2 = u0, u3 = u0, w0 = u0, w1 = u0, w2 = u0, w3 = u0;
  const int64_t whole = n / 32 * 32;
  for (int64_t i = 8 * lane; i < whole; i += 32) {
    __m256 x0 = _mm256_loadu_ps(k0 + i), x1 = _mm256_loadu_ps(k1 + i);
    __m256 y0 = _mm256_loadu_ps(q0 + i), y1 = _mm256_loadu_ps(q1 + i);
    u0 = _mm256_fmadd_ps(y0, x0, u0);
    u1 = _mm256_fmadd_ps(y1, x0, u1);
    u2 = _mm256_fmadd_ps(y0, x1, u2);
    u3 = _mm256_fmadd_ps(y1, x1, u3);
    x0 = _mm256_loadu_ps(k0 + i + 8), x1 = _mm256_loadu_ps(k1 + i + 8);
    y0 = _mm256_loadu_ps(q0 + i + 8), y1 = _mm256_loadu_ps(q1 + i + 8);
    w0 = _mm256_fmadd_ps(y0, x0, w0);
    w1 = _mm256_fmadd_ps(y1, x0, w1);
    w2 = _mm256_fmadd_ps(y0, x1, w2);
    w3 = _mm256_fmadd_ps(y1, x1, w3);
  }
  if (lane == 0) {
    for (int64_t i = whole; i + 8 <= n; i += 8) {
      const __m256 x0 = _mm256_loadu_ps(k0 + i), x1 = _mm256_loadu_ps(k1 + i);
      const __m256 y0 = _mm256_loadu_ps(q0 + i), y1 = _mm256_loadu_ps(q1 + i);
      u0 = _mm256_fmadd_ps(y0, x0, u0);
      u1 = _mm256_fmadd_ps(y1, x0, u1);
      u2 = _mm256_fmadd_ps(y0, x1, u2);
      u3 = _mm256_fmadd_ps(y1, x1, u3);
    }
  }
  out[0] = _mm256_add_ps(u0, w0), out[1] = _mm256_add_ps(u1, w1);
  out[2] = _mm256_add_ps(u2, w2), out[3] = _mm256_add_ps(u3, w3);
}

// Two query rows against two key rows, every dot bit for bit dot_f32(q, k, n): its accumulators
// in two passes, added ((s0 + s1) + (s2 + s3)), hsum's tree, then the scalar tail; returns
// {q0.k0, q1.k0, q0.k1, q1.k1}. Summing as dot_f32 does keeps attention's scores the bits
// scalar-row decoding had (on every AVX2 host), so greedy output near a tie does not move with
// the tile.
ZEN_TARGET_AVX2 inline __m128 dot_2x2(const float* q0, const float* q1, const float* k0, const float* k1, int64_t n) {
  __m256 low[4], high[4];
  dot_2x2_lanes(q0, q1, k0, k1, n, 0, low);
  dot_2x2_lanes(q0, q1, k0, k1, n, 2, high);
  __m128 d = hsum4(_mm256_add_ps(low[0], high[0]), _mm256_add_ps(low[1], high[1]), _mm256_add_ps(low[2], high[2]),
                   _mm256_add_ps(low[3], high[3]));
  const int64_t wide = n / 8 * 8;
  if (wide < n) {
    alignas(16) float t[4];
    _mm_store_ps(t, d);
    const float* const rows[4] = {q0, q1, q0, q1};
    const float* const keys[4] = {k0, k0, k1, k1};
    for (int d = 0; d < 4; ++d)  // a dot at a time: dot_f32's scalar loop, not a vectorized one
      for (int64_t i = wide; i < n; ++i) t[d] += rows[d][i] * keys[d][i];
    d = _mm_load_ps(t);
  }
  return d;
}

// Rows and keys past the ends are computed on copies of the last live ones and not stored, so
// every dot takes the same path whatever n_q and count.
ZEN_TARGET_AVX2 void dot_tile_f32(const float* const* q, int64_t n_q, const float* k, int64_t k_stride, int64_t count,
                                  int64_t n, float scale, float* out, int64_t out_stride) {
  const __m128 s = _mm_set1_ps(scale);
  for (int64_t r0 = 0; r0 < n_q; r0 += 2) {
    const bool two_rows = r0 + 1 < n_q;
    const float* q0 = q[r0];
    const float* q1 = two_rows ? q[r0 + 1] : q0;
    float* out0 = out + r0 * out_stride;
    float* out1 = out0 + out_stride;
    for (int64_t j0 = 0; j0 < count; j0 += 2) {
      const float* k0 = k + j0 * k_stride;
      const bool two_keys = j0 + 1 < count;
      alignas(16) float t[4];
      _mm_store_ps(t, _mm_mul_ps(dot_2x2(q0, q1, k0, two_keys ? k0 + k_stride : k0, n), s));
      out0[j0] = t[0];
      if (two_rows) out1[j0] = t[1];
      if (two_keys) {
        out0[j0 + 1] = t[2];
        if (two_rows) out1[j0 + 1] = t[3];
      }
    }
  }
}

// Two accumulator rows over 32 columns of the block: their 8 sums stay in registers for the
// whole block (8 independent FMA chains; each V load serves both rows).
ZEN_TARGET_AVX2 inline void axpy_block2_32(const float* p0, const float* p1, const float* v, int64_t v_stride,
                                           int64_t count, float* acc0, float* acc1) {
  __m256 a[4], b[4];
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    a[c] = _mm256_loadu_ps(acc0 + 8 * c);
    b[c] = _mm256_loadu_ps(acc1 + 8 * c);
  }
  for (int64_t j = 0; j < count; ++j) {
    const __m256 pa = _mm256_broadcast_ss(p0 + j), pb = _mm256_broadcast_ss(p1 + j);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256 vj = _mm256_loadu_ps(v + j * v_stride + 8 * c);
      a[c] = _mm256_fmadd_ps(pa, vj, a[c]);
      b[c] = _mm256_fmadd_ps(pb, vj, b[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(acc0 + 8 * c, a[c]);
    _mm256_storeu_ps(acc1 + 8 * c, b[c]);
  }
}

// One accumulator row over 8 columns (what is left after the 32-column chunks).
ZEN_TARGET_AVX2 inline void axpy_block1_8(const float* p, const float* v, int64_t v_stride, int64_t count, float* acc) {
  __m256 a = _mm256_loadu_ps(acc);
  for (int64_t j = 0; j < count; ++j) a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), _mm256_loadu_ps(v + j * v_stride), a);
  _mm256_storeu_ps(acc, a);
}

// Rows go in pairs (an odd last row pairs with itself and is stored twice, the same value), 32
// columns at a time; per element the FMAs run in row order exactly as axpy_f32 row by row.
ZEN_TARGET_AVX2 void axpy_rows_f32(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t count,
                                   int64_t n, float* acc, int64_t acc_stride, int64_t n_acc) {
  const int64_t wide = n / 32 * 32;
  for (int64_t r = 0; r < n_acc; r += 2) {
    const int64_t r1 = r + 1 < n_acc ? r + 1 : r;
    const float* p0 = p + r * p_stride;
    const float* p1 = p + r1 * p_stride;
    float* acc0 = acc + r * acc_stride;
    float* acc1 = acc + r1 * acc_stride;
    if (r1 == r) {  // alone: a private copy for the second row, so the pair never aliases
      for (int64_t i = 0; i < wide; i += 32) {
        alignas(32) float spare[32];
        std::copy(acc0 + i, acc0 + i + 32, spare);
        axpy_block2_32(p0, p0, v + i, v_stride, count, acc0 + i, spare);
      }
    } else {
      for (int64_t i = 0; i < wide; i += 32) axpy_block2_32(p0, p1, v + i, v_stride, count, acc0 + i, acc1 + i);
    }
    for (int64_t row = r; row <= r1; ++row) {
      float* a = acc + row * acc_stride;
      const float* pr = p + row * p_stride;
      int64_t i = wide;
      for (; i + 8 <= n; i += 8) axpy_block1_8(pr, v + i, v_stride, count, a + i);
      for (; i < n; ++i)
        for (int64_t j = 0; j < count; ++j) a[i] += pr[j] * v[j * v_stride + i];  // as axpy_f32's tail
    }
  }
}

}  // namespace zen::kernels::avx2

#endif  // ZEN_HAVE_X86_SIMD
