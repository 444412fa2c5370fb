// Weight-times-activation products for every stored weight format.
#pragma once
#include <cstdint>

#include "base/thread_pool.h"
#include "io/tensor.h"

namespace zen::kernels {

// y[t, n] = sum_k W[n, k] * x[t, k]; W: [N, K] in any supported dtype, x: [T, K] f32
// row-major, y: [T, N] f32. Batch-invariant: y[t] depends neither on T nor on the pool size
// (every element is one vec_dot call on the same quantized activation row).
// (Signature relied on by src/model/dense.cc.)
// Activation rows are quantized once per call into a per-thread scratch buffer that only
// grows, so steady-state calls do not allocate.
void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

}  // namespace zen::kernels
