// NVFP4 products. AVX2 path: fp_gemm.h over weights dequantized exactly as
// nvfp4_dequantize_row does (decode_group); scalar path: ref::nvfp4_row_dot per output.
#include "kernels/cpu/nvfp4.h"

#include <array>

#include "base/error.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/fp_gemm.h"
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>
#endif

namespace zen::kernels {
namespace {

// Code 8 (negative zero) decodes to +0 as in ModelOpt's table.
constexpr std::array<float, 16> kE2M1 = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                         0.0f,  -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

const uint8_t* row_codes(const Nvfp4Matrix& w, int64_t row) {
  return w.data + static_cast<size_t>(row) * static_cast<size_t>(w.cols / 2);
}
const uint8_t* row_scales(const Nvfp4Matrix& w, int64_t row) {
  return w.scales + static_cast<size_t>(row) * static_cast<size_t>(w.cols / kNvfp4GroupSize);
}

#if ZEN_HAVE_X86_SIMD
// A group's scale as the kernels apply it: half of (block scale * global scale), rounded as
// nvfp4_dequantize_row rounds it, then halved (exact), because the codes decode to 2 * E2M1.
// e4m3: e4m3_lut(), fetched once per call by the callers (it sits behind a static-init guard).
inline float half_group_scale(const float* e4m3, const Nvfp4Matrix& w, uint8_t scale_code) {
  return 0.5f * (e4m3[scale_code] * w.global_scale);
}

// The 16 weights of one group, exactly as nvfp4_dequantize_row writes them: the 8 code bytes
// split into nibbles in element order, a byte shuffle maps each code to 2 * E2M1 (an int8:
// 0,1,2,3,4,6,8,12 signed), widened to f32 and multiplied by the halved group scale; the
// product of 2 * E2M1 (<= 2 significant bits) and the halved scale rounds exactly as
// E2M1 * scale does.
ZEN_TARGET_AVX2 inline void decode_group(const uint8_t* codes, float half_scale, __m256* w0, __m256* w1) {
  const __m128i twice_e2m1 = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
  const __m128i lo = _mm_and_si128(bytes, low4);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
  const __m128i vals = _mm_shuffle_epi8(twice_e2m1, _mm_unpacklo_epi8(lo, hi));  // 16 x int8
  const __m256 s = _mm256_set1_ps(half_scale);
  *w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(vals)), s);
  *w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(vals, 8))), s);
}

// y[r0 + r] for R rows, one token, in the fp_gemm.h order; the rows share the x loads and
// give the FMA chains R-way independence.
template <int R>
ZEN_TARGET_AVX2 void gemv_rows(const Nvfp4Matrix& w, int64_t r0, const float* x, float* y) {
  const uint8_t* codes[R];
  const uint8_t* scales[R];
  __m256 acc[R];
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    codes[r] = row_codes(w, r0 + r);
    scales[r] = row_scales(w, r0 + r);
    acc[r] = _mm256_setzero_ps();
  }
  const int64_t groups = w.cols / kNvfp4GroupSize;
  const float* e4m3 = e4m3_lut();
  for (int64_t g = 0; g < groups; ++g) {
    const __m256 x0 = _mm256_loadu_ps(x + g * kNvfp4GroupSize), x1 = _mm256_loadu_ps(x + g * kNvfp4GroupSize + 8);
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m256 w0, w1;
      decode_group(codes[r] + 8 * g, half_group_scale(e4m3, w, scales[r][g]), &w0, &w1);
      acc[r] = _mm256_fmadd_ps(w0, x0, acc[r]);
      acc[r] = _mm256_fmadd_ps(w1, x1, acc[r]);
    }
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y[r] = hsum(acc[r]);  // y: [R]
}

ZEN_TARGET_AVX2 void gemv_avx2(const void* ctx, int64_t r0, int64_t r1, const float* x, float* y) {
  const auto& w = *static_cast<const Nvfp4Matrix*>(ctx);
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) gemv_rows<4>(w, r, x, y + r);
  for (; r < r1; ++r) gemv_rows<1>(w, r, x, y + r);
}

ZEN_TARGET_AVX2 void decode_panel_avx2(const void* ctx, int64_t r0, int64_t n, float* panel) {
  const auto& w = *static_cast<const Nvfp4Matrix*>(ctx);
  const float* e4m3 = e4m3_lut();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* codes = row_codes(w, r0 + i);
    const uint8_t* scales = row_scales(w, r0 + i);
    float* out = panel + i * w.cols;  // cols is a multiple of 16: no padding
    for (int64_t g = 0; g < w.cols / kNvfp4GroupSize; ++g) {
      __m256 w0, w1;
      decode_group(codes + 8 * g, half_group_scale(e4m3, w, scales[g]), &w0, &w1);
      _mm256_storeu_ps(out + g * kNvfp4GroupSize, w0);
      _mm256_storeu_ps(out + g * kNvfp4GroupSize + 8, w1);
    }
  }
}

ZEN_TARGET_AVX2 float nvfp4_row_dot_avx2(const Nvfp4Matrix& w, int64_t row, const float* x) {
  float y = 0.0f;
  gemv_rows<1>(w, row, x, &y);
  return y;
}
#endif

float row_dot_thunk(const void* ctx, int64_t row, const float* x) {
  return nvfp4_row_dot(*static_cast<const Nvfp4Matrix*>(ctx), row, x);
}

}  // namespace

float e2m1_to_f32(uint8_t code) { return kE2M1[code & 0xF]; }

float ref::nvfp4_row_dot(const Nvfp4Matrix& w, int64_t row, const float* x) {
  const uint8_t* codes = row_codes(w, row);
  const uint8_t* scales = row_scales(w, row);
  const float* e4m3 = e4m3_lut();
  float acc = 0.0f;
  for (int64_t g = 0; g < w.cols / kNvfp4GroupSize; ++g) {
    float sum = 0.0f;
    for (int64_t i = 0; i < kNvfp4GroupSize; i += 2) {
      const uint8_t b = codes[(g * kNvfp4GroupSize + i) / 2];
      sum += kE2M1[b & 0xF] * x[g * kNvfp4GroupSize + i];
      sum += kE2M1[b >> 4] * x[g * kNvfp4GroupSize + i + 1];
    }
    acc += sum * e4m3[scales[g]];
  }
  return acc * w.global_scale;
}

float nvfp4_row_dot(const Nvfp4Matrix& w, int64_t row, const float* x) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return nvfp4_row_dot_avx2(w, row, x);
#endif
  return ref::nvfp4_row_dot(w, row, x);
}

void nvfp4_dequantize_row(const Nvfp4Matrix& w, int64_t row, float* out) {
  const uint8_t* codes = row_codes(w, row);
  const uint8_t* scales = row_scales(w, row);
  const float* e4m3 = e4m3_lut();
  for (int64_t k = 0; k < w.cols; ++k) {
    const uint8_t b = codes[k / 2];
    const uint8_t code = (k & 1) != 0 ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xF);
    // Same association as ModelOpt's dequantize: e2m1 * (block scale * global scale).
    out[k] = kE2M1[code] * (e4m3[scales[k / kNvfp4GroupSize]] * w.global_scale);
  }
}

void nvfp4_matmul(const Nvfp4Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  ZEN_CHECK(w.cols % kNvfp4GroupSize == 0, "NVFP4 cols ", w.cols, " not a multiple of 16");
  const size_t bytes = static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols / 2 + w.cols / kNvfp4GroupSize);
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) {
    const FpGemmFormat f{&w, w.rows, w.cols, bytes, decode_panel_avx2, gemv_avx2};
    return fp_gemm_avx2(f, x, n_tokens, y, pool);
  }
#endif
  rowwise_matmul(row_dot_thunk, &w, w.rows, w.cols, bytes, x, n_tokens, y, pool);
}

}  // namespace zen::kernels
