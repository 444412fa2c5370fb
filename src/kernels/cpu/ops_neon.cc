// NEON versions of the f32 vector ops (aarch64 only; the file is empty elsewhere). They follow
// ops_avx2.cc step for step, 4 lanes wide, so both backends round the same way where they can.
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_NEON
#include <arm_neon.h>

#include <cmath>
#include <limits>

#include "base/numeric.h"
#include "kernels/cpu/ops_neon.h"

namespace zen::kernels::neon {
namespace {

// Adds the 4 floats of v, widened to f64, to acc (2 x f64).
inline float64x2_t add_widened(float64x2_t acc, float32x4_t v) {
  acc = vaddq_f64(acc, vcvt_f64_f32(vget_low_f32(v)));
  return vaddq_f64(acc, vcvt_high_f64_f32(v));
}

inline float32x4_t pow2i(int32x4_t k) {
  return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k, vdupq_n_s32(127)), 23));
}

// exp(x): x = n*ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact product), a degree-7
// polynomial for exp(r) (Cephes expf coefficients), times 2^n applied as two factors so that
// results near overflow and in the subnormal range come out right (as ops_avx2.cc's exp256).
inline float32x4_t exp4(float32x4_t x) {
  const float32x4_t xc = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0f)), vdupq_n_f32(89.0f));
  const float32x4_t n = vrndnq_f32(vmulq_f32(xc, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(xc, n, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
  p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
  p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
  const float32x4_t y = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0f));
  const int32x4_t ni = vcvtq_s32_f32(n);  // n is integral already
  const int32x4_t n1 = vshrq_n_s32(ni, 1);
  const float32x4_t res = vmulq_f32(vmulq_f32(y, pow2i(n1)), pow2i(vsubq_s32(ni, n1)));
  return vbslq_f32(vceqq_f32(x, x), res, x);  // NaN in, NaN out
}

inline float exp1(float x) { return vgetq_lane_f32(exp4(vdupq_n_f32(x)), 0); }

}  // namespace

void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out) {
  float64x2_t acc0 = vdupq_n_f64(0.0), acc1 = vdupq_n_f64(0.0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
    acc0 = add_widened(acc0, vmulq_f32(a, a));
    acc1 = add_widened(acc1, vmulq_f32(b, b));
  }
  double sum = vaddvq_f64(vaddq_f64(acc0, acc1));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  const float32x4_t s = vdupq_n_f32(scale);
  i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), s), vld1q_f32(w + i)));
  for (; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

void add_inplace(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vld1q_f32(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const float32x4_t one = vdupq_n_f32(1.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t g = vld1q_f32(gate + i);
    const float32x4_t silu = vdivq_f32(g, vaddq_f32(one, exp4(vnegq_f32(g))));
    vst1q_f32(out + i, vmulq_f32(silu, vld1q_f32(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + exp1(-gate[i])) * up[i];
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
    s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
  }
  for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
  float sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  const float32x4_t av = vdupq_n_f32(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), av, vld1q_f32(x + i)));
    vst1q_f32(y + i + 4, vfmaq_f32(vld1q_f32(y + i + 4), av, vld1q_f32(x + i + 4)));
  }
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), av, vld1q_f32(x + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void softmax_inplace(float* x, int64_t n) {
  if (n <= 0) return;
  float32x4_t mv = vdupq_n_f32(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) mv = vmaxq_f32(mv, vld1q_f32(x + i));
  float max = vmaxvq_f32(mv);
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  const float32x4_t m = vdupq_n_f32(max);
  float64x2_t acc = vdupq_n_f64(0.0);
  i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = exp4(vsubq_f32(vld1q_f32(x + i), m));
    vst1q_f32(x + i, e);
    acc = add_widened(acc, e);
  }
  double sum = vaddvq_f64(acc);
  for (; i < n; ++i) {
    x[i] = exp1(x[i] - max);
    sum += x[i];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  const float32x4_t iv = vdupq_n_f32(inv);
  i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_f32(vld1q_f32(x + i), iv));
  for (; i < n; ++i) x[i] *= inv;
}

void exp_f32(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, exp4(vld1q_f32(x + i)));
  for (; i < n; ++i) out[i] = exp1(x[i]);
}

void dot_tile_f32(const float* const* q, int64_t n_q, const float* k, int64_t k_stride, int64_t count, int64_t n, float scale,
                  float* out, int64_t out_stride) {
  for (int64_t r = 0; r < n_q; ++r)
    for (int64_t j = 0; j < count; ++j) out[r * out_stride + j] = dot_f32(q[r], k + j * k_stride, n) * scale;
}

void axpy_rows_f32(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t count, int64_t n, float* acc,
                   int64_t acc_stride, int64_t n_acc) {
  for (int64_t r = 0; r < n_acc; ++r)
    for (int64_t j = 0; j < count; ++j) axpy_f32(p[r * p_stride + j], v + j * v_stride, acc + r * acc_stride, n);
}

void bf16_to_f32_row(const uint16_t* src, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(src + i), 16)));
  for (; i < n; ++i) out[i] = bf16_to_f32(src[i]);
}

}  // namespace zen::kernels::neon

#endif  // ZEN_HAVE_NEON
