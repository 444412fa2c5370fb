// NEON (aarch64 Advanced SIMD) versions of the quant kernels (quant_neon.cc). Call only when
// use_neon(). Quantizers give bytes identical to the ref:: versions. The block-format dot
// products sum each block (or super-block) in exact integers and then do the reference's
// float operations in the reference's order, so they equal ref::vec_dot bit for bit; the
// plain formats (F32/F16/BF16) differ from ref:: only in float summation order.
// Internal to kernels/cpu.
#pragma once
#include <cstdint>

#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/quant.h"

namespace zen::kernels::neon {

// Whether the CPU has the dot-product extension (SDOT, HWCAP_ASIMDDP); the integer kernels
// use it when present and widening multiplies otherwise, with identical results.
bool has_dotprod();

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);

// The dot product of one row for a dtype (nullptr for dtypes without one).
VecDotFn dot_fn(DType t);

// Tiled kernels (see dot_kernels.h); false for dtypes without them.
bool tiled_kernels(DType t, DotKernels* out);

}  // namespace zen::kernels::neon
