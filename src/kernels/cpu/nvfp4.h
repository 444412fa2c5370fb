// NVFP4 weights as NVIDIA ModelOpt stores them, times f32 activations.
//   weight        U8      [N, K/2]   two E2M1 codes per byte, low nibble = even element;
//                                    code = sign bit (8) | magnitude index into
//                                    {0, 0.5, 1, 1.5, 2, 3, 4, 6}
//   weight_scale  F8_E4M3 [N, K/16]  one scale per group of 16 elements
//   weight_scale_2 F32    scalar     global scale
//   W[n, k] = e2m1(code[n, k]) * e4m3(weight_scale[n, k / 16]) * weight_scale_2
#pragma once
#include <cstdint>

#include "base/thread_pool.h"

namespace zen::kernels {

constexpr int64_t kNvfp4GroupSize = 16;

float e2m1_to_f32(uint8_t code);  // low 4 bits used

struct Nvfp4Matrix {
  const uint8_t* data = nullptr;    // [rows, cols / 2]
  const uint8_t* scales = nullptr;  // [rows, cols / 16] e4m3
  int64_t rows = 0, cols = 0;       // cols: a multiple of 16
  float global_scale = 1.0f;        // weight_scale_2
};

// y[t, n] = sum_k W[n, k] * x[t, k]; x: [T, cols], y: [T, rows]. Batch-invariant.
void nvfp4_matmul(const Nvfp4Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);
float nvfp4_row_dot(const Nvfp4Matrix& w, int64_t row, const float* x);  // dispatched
void nvfp4_dequantize_row(const Nvfp4Matrix& w, int64_t row, float* out);  // out[cols]

namespace ref {
// Per group: sum of e2m1 * x in order, times the group's e4m3 scale, accumulated; the total
// times global_scale.
float nvfp4_row_dot(const Nvfp4Matrix& w, int64_t row, const float* x);
}  // namespace ref

}  // namespace zen::kernels
