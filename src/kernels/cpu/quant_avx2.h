// AVX2+FMA+F16C versions of the quant kernels (quant_avx2.cc). Call only when use_avx2().
// Quantizers give bytes identical to the ref:: versions; dot products differ from ref:: only
// in float summation order. Internal to kernels/cpu.
#pragma once
#include <cstdint>

#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/quant.h"

namespace zen::kernels::avx2 {

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);

float dot_q4_0(const void* w, const void* act, int64_t n);
float dot_q4_1(const void* w, const void* act, int64_t n);
float dot_q5_0(const void* w, const void* act, int64_t n);
float dot_q5_1(const void* w, const void* act, int64_t n);
float dot_q8_0(const void* w, const void* act, int64_t n);
float dot_q4_k(const void* w, const void* act, int64_t n);
float dot_q5_k(const void* w, const void* act, int64_t n);
float dot_q6_k(const void* w, const void* act, int64_t n);
float dot_f32(const void* w, const void* act, int64_t n);
float dot_f16(const void* w, const void* act, int64_t n);
float dot_bf16(const void* w, const void* act, int64_t n);

// Tiled kernels (see dot_kernels.h); false for dtypes without them.
bool tiled_kernels(DType t, DotKernels* out);

}  // namespace zen::kernels::avx2
