// 8-bit float formats (OCP FP8): E4M3FN (weights of FP8 checkpoints, NVFP4 block scales) and
// E5M2 (for KV caches), and products of FP8 weight matrices with f32 activations.
//
// E4M3FN: bias 7, no infinities, S.1111.111 is NaN, max 448, subnormals m * 2^-9.
// E5M2:   bias 15, IEEE-like (infinities, NaNs), subnormals m * 2^-16.
//
// FP8 weights come in two scalings:
//   per-tensor (NVIDIA ModelOpt "FP8"):  W[n, k] = e4m3(w[n, k]) * weight_scale;
//   block (Qwen / DeepSeek "fp8" with weight_block_size [bn, bk]):
//                                         W[n, k] = e4m3(w[n, k]) * scale_inv[n / bn, k / bk].
// Both are expressed as one Fp8Matrix whose scale grid has one cell for per-tensor scaling.
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/thread_pool.h"

namespace zen::kernels {

// Exact decodes (table lookups; NaN encodings decode to NaN).
float e4m3_to_f32(uint8_t b);
float e5m2_to_f32(uint8_t b);
void dequantize_e4m3(const uint8_t* src, float* out, int64_t n);
// The 256-entry E4M3 decode table, for kernels that look up many values in a loop.
const float* e4m3_lut();
// The 256-entry E5M2 decode table (KV-cache reads).
const float* e5m2_lut();
void dequantize_e5m2(const uint8_t* src, float* out, int64_t n);

// An FP8 E4M3 weight matrix [rows, cols] with a grid of scales over [block_rows, block_cols]
// tiles: scales is [ceil(rows / block_rows), ceil(cols / block_cols)] row-major. Per-tensor
// scaling: block_rows = rows, block_cols = cols, scales -> one float.
struct Fp8Matrix {
  const uint8_t* data = nullptr;  // [rows, cols] e4m3, row-major
  int64_t rows = 0, cols = 0;
  const float* scales = nullptr;
  int64_t block_rows = 0, block_cols = 0;
  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
};

// y[t, n] = sum_k W[n, k] * x[t, k]; x: [T, cols] f32, y: [T, rows] f32. Parallel over rows;
// batch-invariant (every y[t, n] is one fp8_row_dot of row n with x[t]).
void fp8_matmul(const Fp8Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);
// One output element through the dispatched (AVX2 or scalar) path.
float fp8_row_dot(const Fp8Matrix& w, int64_t row, const float* x);
// Row `row` of W in f32 (scales applied): out[cols].
void fp8_dequantize_row(const Fp8Matrix& w, int64_t row, float* out);

// Generic driver shared by the FP8 and NVFP4 matmuls: y[t, r] = row_dot(ctx, r, x[t]) for
// every row r and token t; rows are split over the pool, prefill walks row tiles x token
// tiles so a tile of weight rows stays in cache while the tokens reuse it.
using RowDotFn = float (*)(const void* ctx, int64_t row, const float* x);
void rowwise_matmul(RowDotFn row_dot, const void* ctx, int64_t rows, int64_t cols, size_t weight_bytes,
                    const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

namespace ref {
// Arithmetic decodes (no tables), the definitions the tables are built from.
float e4m3_decode(uint8_t b);
float e5m2_decode(uint8_t b);
// Scalar reference: per scale block, sum in order, then acc += partial * scale.
float fp8_row_dot(const Fp8Matrix& w, int64_t row, const float* x);
// sum_i e4m3(w[i]) * x[i] in order.
float dot_e4m3(const uint8_t* w, const float* x, int64_t n);
}  // namespace ref

}  // namespace zen::kernels
