// BF16 weight matrices through the fp_gemm.h kernels (AVX2): prefill widens a tile of rows to
// an f32 panel once (exact: bf16 -> f32 is a shift) and runs register-blocked FMA tiles over
// it; decode runs the same per-row FMA chains straight from the bf16 rows, 4 rows sharing
// each x load. One accumulation order for every batch size, so results are batch-invariant.
#pragma once
#include <cstdint>

#include "base/thread_pool.h"
#include "io/tensor.h"

namespace zen::kernels {

// y[t, n] = sum_k W[n, k] * x[t, k] for a BF16 w [N, K]; requires AVX2 (use_avx2()).
void bf16_matmul_avx2(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

}  // namespace zen::kernels
