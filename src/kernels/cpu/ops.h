// Small f32 vector ops used by the model (signatures relied on by src/model/dense.cc; keep
// them, add fast paths behind them).
#pragma once
#include <cstdint>

namespace zen::kernels {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may alias x.
void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out);
// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
// out[i] = silu(gate[i]) * up[i]; out may alias gate.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
float dot_f32(const float* a, const float* b, int64_t n);
// y[i] += a * x[i]
void axpy_f32(float a, const float* x, float* y, int64_t n);
// In place: x = exp(x - max) / sum.
void softmax_inplace(float* x, int64_t n);

}  // namespace zen::kernels
