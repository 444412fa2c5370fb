// Block formats (llama.cpp ggml-quants layouts) and dot products of one weight row with an
// activation row. Quantized weights are dotted against activations quantized per block the
// way llama.cpp does (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the k-quants),
// so integer dot products do the bulk of the work and results track llama.cpp closely.
// Plain formats (F32, F16, BF16) dot against f32 activations directly (the weight is widened
// to f32, accumulation in f32; llama.cpp instead rounds activations to f16/bf16 there).
//
// Every function has a scalar reference (namespace ref) and a dispatched fast path (AVX2+FMA
// when the CPU has it, chosen at run time; NEON on aarch64, with the dot-product extension
// when the CPU has it); tests compare them on random data with odd sizes.
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

// Q8_0 plus s = f16(d * sum(qs)), which lets Q4_1/Q5_1 fold their block minimum in with one
// multiply (ggml's block_q8_1).
struct BlockQ8_1 {
  uint16_t d;  // f16 scale = amax / 127
  uint16_t s;  // f16 of d * sum(qs)
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_1) == 36);

struct BlockQ8_K {
  float d;            // scale = 1 / iscale, iscale = -127 / max (signed max-magnitude element)
  int8_t qs[256];
  int16_t bsums[16];  // sums of each 16 quants
};
static_assert(sizeof(BlockQ8_K) == 4 + 256 + 32);

// The activation format a weight dtype is dotted against. (Not a DType: Q8_1 and Q8_K are
// never stored in files.)
enum class ActivationFormat : uint8_t { F32, Q8_0, Q8_1, Q8_K };
const char* activation_format_name(ActivationFormat f);

// Throws zen::Error for dtypes that have no dot product (F64, integers, FP8, ...).
ActivationFormat activation_format(DType weight);
// True for the dtypes vec_dot / matmul / dequantize_row support.
bool is_supported_weight_dtype(DType weight);
// Bytes needed to hold one activation row of n elements for this weight dtype.
size_t activation_row_bytes(DType weight, int64_t n);
// Converts an f32 activation row into the format activation_format(weight) wants.
// For F32 it copies. n must be a multiple of the weight's block size.
void quantize_activation(DType weight, const float* x, void* out, int64_t n);

// Dot of one weight row (n elements, stored in `weight` dtype) with one activation row
// prepared by quantize_activation for the same dtype. Supports F32, F16, BF16, Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
float vec_dot(DType weight, const void* wrow, const void* act, int64_t n);

// The dispatched dot product for one dtype, looked up once by callers that loop over rows.
using VecDotFn = float (*)(const void* wrow, const void* act, int64_t n);
VecDotFn vec_dot_fn(DType weight);

// Dequantizes one row of n elements to f32 (reference semantics of ggml's dequantize_row_*).
// n may span several rows of a contiguous tensor.
void dequantize_row(DType weight, const void* wrow, float* out, int64_t n);

// Whether the fast paths (AVX2+FMA on x86-64, NEON on aarch64) are in use. They are chosen
// when the CPU has them; set_simd_enabled(false) forces the scalar references (tests,
// benchmarks), and set_simd_enabled(true) only re-enables them where the CPU supports them.
bool simd_enabled();
void set_simd_enabled(bool enabled);
bool cpu_has_avx2_fma();
// True where a fast path exists for this CPU (AVX2+FMA+F16C on x86-64; always on aarch64).
bool cpu_has_simd();
// The kernels in use now: "avx2", "neon+dotprod", "neon" or "scalar" (logs, tests).
const char* simd_path_name();

// Scalar references, used by tests and as the portable fallback.
namespace ref {
// Activation quantizers. These follow llama.cpp's CPU backend on x86-64 (the AVX path of
// ggml's quantize_row_q8_0 / q8_1: d = amax/127, q = round-half-even(x * (127/amax))), so the
// scalar and SIMD paths give identical bytes, and so does llama.cpp on the same machine.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
// ggml's quantize_row_q8_K_ref: iscale = -127/max, q = min(127, round-half-even(iscale*x)).
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);
// Q8_0 *weight* quantization, ggml's quantize_row_q8_0_ref (= gguf-py): id = 1/d,
// q = round-half-away(x * id). Differs from the activation quantizer in rare ties.
void quantize_weight_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);

float vec_dot(DType weight, const void* wrow, const void* act, int64_t n);
void dequantize_row(DType weight, const void* wrow, float* out, int64_t n);
}  // namespace ref

}  // namespace zen::kernels
