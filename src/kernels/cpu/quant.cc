// Dispatch for the quant kernels: which activation format each weight dtype wants, and
// whether the AVX2, the NEON or the scalar implementation runs.
#include "kernels/cpu/quant.h"

#include <atomic>
#include <cstring>

#include "base/error.h"
#include "kernels/cpu/dot_kernels.h"
#include "base/cpu_features.h"
#include "kernels/cpu/quant_avx2.h"
#include "kernels/cpu/quant_neon.h"
#include "kernels/cpu/simd.h"

namespace zen::kernels {
namespace {

bool detect_avx2_fma() {
#if ZEN_HAVE_X86_SIMD
  const X86Features& f = x86_features();
  return f.avx2 && f.fma && f.f16c;
#else
  return false;
#endif
}

std::atomic<bool> g_simd_enabled{true};

void check_row(DType t, int64_t n) {
  const int64_t be = dtype_block_elems(t);
  if (n < 0 || n % be != 0)
    fail("row of ", n, " elements is not a multiple of the ", dtype_name(t), " block size ", be);
}

float ref_dot_q4_0(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::Q4_0, w, a, n); }
float ref_dot_q4_1(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::Q4_1, w, a, n); }
float ref_dot_q5_0(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::Q5_0, w, a, n); }
float ref_dot_q5_1(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::Q5_1, w, a, n); }
float ref_dot_q8_0(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::Q8_0, w, a, n); }
float ref_dot_q4_k(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::Q4_K, w, a, n); }
float ref_dot_q5_k(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::Q5_K, w, a, n); }
float ref_dot_q6_k(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::Q6_K, w, a, n); }
float ref_dot_f32(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::F32, w, a, n); }
float ref_dot_f16(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::F16, w, a, n); }
float ref_dot_bf16(const void* w, const void* a, int64_t n) { return ref::vec_dot(DType::BF16, w, a, n); }

VecDotFn scalar_dot(DType t) {
  switch (t) {
    case DType::F32: return ref_dot_f32;
    case DType::F16: return ref_dot_f16;
    case DType::BF16: return ref_dot_bf16;
    case DType::Q4_0: return ref_dot_q4_0;
    case DType::Q4_1: return ref_dot_q4_1;
    case DType::Q5_0: return ref_dot_q5_0;
    case DType::Q5_1: return ref_dot_q5_1;
    case DType::Q8_0: return ref_dot_q8_0;
    case DType::Q4_K: return ref_dot_q4_k;
    case DType::Q5_K: return ref_dot_q5_k;
    case DType::Q6_K: return ref_dot_q6_k;
    default: return nullptr;
  }
}

VecDotFn avx2_dot(DType t) {
#if ZEN_HAVE_X86_SIMD
  switch (t) {
    case DType::F32: return avx2::dot_f32;
    case DType::F16: return avx2::dot_f16;
    case DType::BF16: return avx2::dot_bf16;
    case DType::Q4_0: return avx2::dot_q4_0;
    case DType::Q4_1: return avx2::dot_q4_1;
    case DType::Q5_0: return avx2::dot_q5_0;
    case DType::Q5_1: return avx2::dot_q5_1;
    case DType::Q8_0: return avx2::dot_q8_0;
    case DType::Q4_K: return avx2::dot_q4_k;
    case DType::Q5_K: return avx2::dot_q5_k;
    case DType::Q6_K: return avx2::dot_q6_k;
    default: return nullptr;
  }
#else
  (void)t;
  return nullptr;
#endif
}

// Tiles made of one vec_dot call per (row, token): for the scalar path and the plain formats.
template <VecDotFn Dot, int T>
void loop_tile(const uint8_t* w, size_t, const uint8_t* act, size_t act_stride, int64_t k, float* y, ptrdiff_t,
               ptrdiff_t y_tok_step) {
  for (int t = 0; t < T; ++t) y[t * y_tok_step] = Dot(w, act + t * act_stride, k);
}

template <VecDotFn Dot>
DotKernels loop_kernels() {
  DotKernels k;
  k.tile_rows = 1;
  k.rows = loop_tile<Dot, 1>;
  k.tokens[0] = loop_tile<Dot, 1>;
  k.tokens[1] = loop_tile<Dot, 2>;
  k.tokens[2] = loop_tile<Dot, 3>;
  k.tokens[3] = loop_tile<Dot, 4>;
  return k;
}

DotKernels scalar_kernels(DType t) {
  switch (t) {
    case DType::F32: return loop_kernels<ref_dot_f32>();
    case DType::F16: return loop_kernels<ref_dot_f16>();
    case DType::BF16: return loop_kernels<ref_dot_bf16>();
    case DType::Q4_0: return loop_kernels<ref_dot_q4_0>();
    case DType::Q4_1: return loop_kernels<ref_dot_q4_1>();
    case DType::Q5_0: return loop_kernels<ref_dot_q5_0>();
    case DType::Q5_1: return loop_kernels<ref_dot_q5_1>();
    case DType::Q8_0: return loop_kernels<ref_dot_q8_0>();
    case DType::Q4_K: return loop_kernels<ref_dot_q4_k>();
    case DType::Q5_K: return loop_kernels<ref_dot_q5_k>();
    case DType::Q6_K: return loop_kernels<ref_dot_q6_k>();
    default: fail("weight dtype ", dtype_name(t), " has no dot product kernel");
  }
}

}  // namespace

bool cpu_has_avx2_fma() {
  static const bool has = detect_avx2_fma();  // function-local: safe during static init
  return has;
}
bool cpu_has_simd() { return ZEN_HAVE_NEON || cpu_has_avx2_fma(); }
bool simd_enabled() { return use_avx2() || use_neon(); }
void set_simd_enabled(bool enabled) { g_simd_enabled.store(enabled, std::memory_order_relaxed); }
bool use_avx2() { return g_simd_enabled.load(std::memory_order_relaxed) && cpu_has_avx2_fma(); }
bool use_avx512() {
#if ZEN_HAVE_X86_SIMD
  static const bool has = x86_features().avx512f && x86_features().avx512vl;
  return has && use_avx2();
#else
  return false;
#endif
}
bool use_neon() { return ZEN_HAVE_NEON && g_simd_enabled.load(std::memory_order_relaxed); }

const char* simd_path_name() {
  if (use_avx2()) return "avx2";
#if ZEN_HAVE_NEON
  if (use_neon()) return neon::has_dotprod() ? "neon+dotprod" : "neon";
#endif
  return "scalar";
}

const char* activation_format_name(ActivationFormat f) {
  switch (f) {
    case ActivationFormat::F32: return "F32";
    case ActivationFormat::Q8_0: return "Q8_0";
    case ActivationFormat::Q8_1: return "Q8_1";
    case ActivationFormat::Q8_K: return "Q8_K";
  }
  return "?";
}

bool is_supported_weight_dtype(DType weight) { return scalar_dot(weight) != nullptr; }

ActivationFormat activation_format(DType weight) {
  switch (weight) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return ActivationFormat::F32;
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0: return ActivationFormat::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return ActivationFormat::Q8_1;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return ActivationFormat::Q8_K;
    default: fail("weight dtype ", dtype_name(weight), " has no matrix-vector kernel");
  }
}

size_t activation_row_bytes(DType weight, int64_t n) {
  check_row(weight, n);
  const auto count = static_cast<size_t>(n);
  switch (activation_format(weight)) {
    case ActivationFormat::F32: return count * sizeof(float);
    case ActivationFormat::Q8_0: return count / 32 * sizeof(BlockQ8_0);
    case ActivationFormat::Q8_1: return count / 32 * sizeof(BlockQ8_1);
    case ActivationFormat::Q8_K: return count / 256 * sizeof(BlockQ8_K);
  }
  return 0;
}

// The quantizer of one activation format from the backend in use (AVX2, NEON or scalar).
#if ZEN_HAVE_X86_SIMD
#define ZEN_QUANTIZE(fn, Block)                                    \
  if (use_avx2()) return avx2::fn(x, static_cast<Block*>(out), n); \
  return ref::fn(x, static_cast<Block*>(out), n)
#elif ZEN_HAVE_NEON
#define ZEN_QUANTIZE(fn, Block)                                    \
  if (use_neon()) return neon::fn(x, static_cast<Block*>(out), n); \
  return ref::fn(x, static_cast<Block*>(out), n)
#else
#define ZEN_QUANTIZE(fn, Block) return ref::fn(x, static_cast<Block*>(out), n)
#endif

void quantize_activation(DType weight, const float* x, void* out, int64_t n) {
  check_row(weight, n);
  switch (activation_format(weight)) {
    case ActivationFormat::F32:
      std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case ActivationFormat::Q8_0: ZEN_QUANTIZE(quantize_row_q8_0, BlockQ8_0);
    case ActivationFormat::Q8_1: ZEN_QUANTIZE(quantize_row_q8_1, BlockQ8_1);
    case ActivationFormat::Q8_K: ZEN_QUANTIZE(quantize_row_q8_K, BlockQ8_K);
  }
}

#undef ZEN_QUANTIZE

VecDotFn vec_dot_fn(DType weight) {
  VecDotFn fn = use_avx2() ? avx2_dot(weight) : nullptr;
#if ZEN_HAVE_NEON
  if (use_neon()) fn = neon::dot_fn(weight);
#endif
  if (fn == nullptr) fn = scalar_dot(weight);
  if (fn == nullptr) fail("weight dtype ", dtype_name(weight), " has no dot product kernel");
  return fn;
}

DotKernels dot_kernels(DType weight) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) {
    DotKernels k;
    if (avx2::tiled_kernels(weight, &k)) return k;
  }
#endif
#if ZEN_HAVE_NEON
  if (use_neon()) {
    DotKernels k;
    if (neon::tiled_kernels(weight, &k)) return k;
  }
#endif
  return scalar_kernels(weight);
}

float vec_dot(DType weight, const void* wrow, const void* act, int64_t n) {
  check_row(weight, n);
  return vec_dot_fn(weight)(wrow, act, n);
}

// Dequantization is off the hot path (embedding rows, load-time conversions): the scalar
// reference is exact by construction.
void dequantize_row(DType weight, const void* wrow, float* out, int64_t n) {
  ref::dequantize_row(weight, wrow, out, n);
}

}  // namespace zen::kernels
