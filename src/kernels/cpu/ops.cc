// Scalar references of the f32 vector ops and the dispatch to their AVX2 / NEON versions.
#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/numeric.h"
#include "kernels/cpu/ops_avx2.h"
#include "kernels/cpu/ops_avx512.h"
#include "kernels/cpu/ops_neon.h"
#include "kernels/cpu/simd.h"

namespace zen::kernels {

namespace ref {

void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void softmax_inplace(float* x, int64_t n) {
  if (n <= 0) return;
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void exp_f32(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
}

void bf16_to_f32_row(const uint16_t* src, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(src[i]);
}

int64_t argmax_f32(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
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

}  // namespace ref

#if ZEN_HAVE_X86_SIMD
#define ZEN_DISPATCH(call) \
  if (use_avx2()) return avx2::call; \
  return ref::call
#elif ZEN_HAVE_NEON
#define ZEN_DISPATCH(call) \
  if (use_neon()) return neon::call; \
  return ref::call
#else
#define ZEN_DISPATCH(call) return ref::call
#endif

void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out) {
  ZEN_DISPATCH(rmsnorm(x, w, eps, n, out));
}
void add_inplace(float* y, const float* x, int64_t n) { ZEN_DISPATCH(add_inplace(y, x, n)); }
int64_t argmax_f32(const float* x, int64_t n) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return avx2::argmax_f32(x, n);
#endif
  return ref::argmax_f32(x, n);
}
void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  ZEN_DISPATCH(silu_mul(gate, up, n, out));
}
float dot_f32(const float* a, const float* b, int64_t n) { ZEN_DISPATCH(dot_f32(a, b, n)); }
void axpy_f32(float a, const float* x, float* y, int64_t n) { ZEN_DISPATCH(axpy_f32(a, x, y, n)); }
void softmax_inplace(float* x, int64_t n) { ZEN_DISPATCH(softmax_inplace(x, n)); }
void exp_f32(const float* x, int64_t n, float* out) { ZEN_DISPATCH(exp_f32(x, n, out)); }
void bf16_to_f32_row(const uint16_t* src, float* out, int64_t n) { ZEN_DISPATCH(bf16_to_f32_row(src, out, n)); }
void dot_tile_f32(const float* const* q, int64_t n_q, const float* k, int64_t k_stride, int64_t count, int64_t n, float scale,
                  float* out, int64_t out_stride) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx512()) return avx512::dot_tile_f32(q, n_q, k, k_stride, count, n, scale, out, out_stride);
#endif
  ZEN_DISPATCH(dot_tile_f32(q, n_q, k, k_stride, count, n, scale, out, out_stride));
}
void axpy_rows_f32(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t count, int64_t n, float* acc,
                   int64_t acc_stride, int64_t n_acc) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx512()) return avx512::axpy_rows_f32(p, p_stride, v, v_stride, count, n, acc, acc_stride, n_acc);
#endif
  ZEN_DISPATCH(axpy_rows_f32(p, p_stride, v, v_stride, count, n, acc, acc_stride, n_acc));
}

#undef ZEN_DISPATCH

}  // namespace zen::kernels
