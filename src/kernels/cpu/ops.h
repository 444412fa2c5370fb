// Small f32 vector ops used by the model (signatures relied on by src/model/dense.cc; keep
// them, add fast paths behind them). Each dispatches to AVX2 when available (see quant.h's
// set_simd_enabled) and has a scalar reference in namespace ref.
#pragma once
#include <cstdint>

namespace zen::kernels {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may alias x. As llama.cpp: squares in
// f32 summed in f64, scale = 1/sqrtf(mean + eps), out = (x * scale) * w.
void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out);
// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)); out may alias gate or up.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
float dot_f32(const float* a, const float* b, int64_t n);
// y[i] += a * x[i]
void axpy_f32(float a, const float* x, float* y, int64_t n);
// In place: x = exp(x - max) / sum (sum accumulated in f64).
void softmax_inplace(float* x, int64_t n);
// Attention scores over one KV-cache block (model/attention.cc) for n_q query rows (the
// (token, head) pairs of a tile), q[r] and every key row n floats long:
// out[r * out_stride + j] = <q[r], k + j * k_stride> * scale for r < n_q, j < count. Every dot
// is summed the same way whatever n_q, count and the rows around it, so a query's scores do not
// depend on what it is batched with (speculative verification equals one-token decoding).
void dot_tile_f32(const float* const* q, int64_t n_q, const float* k, int64_t k_stride, int64_t count, int64_t n, float scale,
                  float* out, int64_t out_stride);
// For each of n_acc accumulator rows r sharing the block's V rows (the query heads of a GQA
// group): acc[r * acc_stride + i] += p[r * p_stride + j] * v[j * v_stride + i] for j = 0 ..
// count - 1 in that order, i < n; each step exactly axpy_f32 (an FMA where the backend has one).
void axpy_rows_f32(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t count, int64_t n, float* acc,
                   int64_t acc_stride, int64_t n_acc);
// out[i] = exp(x[i]); the vectorized exp used by softmax/silu (a few ulp; underflows
// gradually to 0 below about -87.3, +inf above 88.72, NaN stays NaN).
void exp_f32(const float* x, int64_t n, float* out);
// out[i] = the f32 whose high half is src[i] (bf16 widening, exact; KV-cache reads).
void bf16_to_f32_row(const uint16_t* src, float* out, int64_t n);
// The index of the first maximum of x[0..n), n >= 1, as torch.argmax and the loop "x[i] >
// x[best]": NaNs are never chosen, except that a NaN at index 0 is returned (nothing
// compares greater than it); +0 and -0 are equal, so the first of them wins.
int64_t argmax_f32(const float* x, int64_t n);

namespace ref {
void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out);
void add_inplace(float* y, const float* x, int64_t n);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
void softmax_inplace(float* x, int64_t n);
void exp_f32(const float* x, int64_t n, float* out);
void bf16_to_f32_row(const uint16_t* src, float* out, int64_t n);
void dot_tile_f32(const float* const* q, int64_t n_q, const float* k, int64_t k_stride, int64_t count, int64_t n, float scale,
                  float* out, int64_t out_stride);
void axpy_rows_f32(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t count, int64_t n, float* acc,
                   int64_t acc_stride, int64_t n_acc);
int64_t argmax_f32(const float* x, int64_t n);
}  // namespace ref

}  // namespace zen::kernels
