// Block formats (llama.cpp ggml-quants layouts) and dot products of one weight row with an
// activation row. Quantized weights are dotted against activations quantized per block the
// way llama.cpp does (Q8_0 for the 32-element formats, Q8_K for the k-quants), so integer
// dot products do the bulk of the work and results track llama.cpp closely. Plain formats
// (F32, F16, BF16) dot against f32 activations directly.
//
// Every function has a scalar reference (namespace ref) and a dispatched fast path; tests
// compare them on random data with odd sizes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "io/tensor.h"

namespace zen::kernels {

// Activation-side formats.
struct BlockQ8_0 {
  uint16_t d;  // f16 scale = amax / 127
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ8_K {
  float d;            // scale = 1 / iscale, iscale = -128 / max (signed max-magnitude element)
  int8_t qs[256];
  int16_t bsums[16];  // sums of each 16 quants
};
static_assert(sizeof(BlockQ8_K) == 4 + 256 + 32);

// The activation format a weight dtype is dotted against: Q8_0, Q8_K, or F32 (plain types).
DType activation_dtype(DType weight);
// Bytes needed to hold one activation row of n elements for this weight dtype.
size_t activation_row_bytes(DType weight, int64_t n);
// Converts an f32 activation row into the format activation_dtype(weight) wants.
// For F32 it copies. n must be a multiple of the weight's block size.
void quantize_activation(DType weight, const float* x, void* out, int64_t n);

// Dot of one weight row (n elements, stored in `weight` dtype) with one activation row
// prepared by quantize_activation for the same dtype. Supports F32, F16, BF16, Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
float vec_dot(DType weight, const void* wrow, const void* act, int64_t n);

// Dequantizes one row of n elements to f32 (reference semantics of ggml's dequantize_row_*).
void dequantize_row(DType weight, const void* wrow, float* out, int64_t n);

// Scalar references, used by tests and as the portable fallback.
namespace ref {
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);
float vec_dot(DType weight, const void* wrow, const void* act, int64_t n);
void dequantize_row(DType weight, const void* wrow, float* out, int64_t n);
}  // namespace ref

}  // namespace zen::kernels
