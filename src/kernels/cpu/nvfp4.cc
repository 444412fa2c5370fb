// NVFP4 products. AVX2 path: a group's 8 bytes are split into 16 nibbles in element order,
// a byte shuffle maps each code to twice its E2M1 value (an int8: 0,1,2,3,4,6,8,12 signed),
// which widens to f32 exactly; the halving is folded into the final scale (a power of two).
#include "kernels/cpu/nvfp4.h"

#include <array>

#include "base/error.h"
#include "kernels/cpu/fp8.h"
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
ZEN_TARGET_AVX2 float nvfp4_row_dot_avx2(const Nvfp4Matrix& w, int64_t row, const float* x) {
  const uint8_t* codes = row_codes(w, row);
  const uint8_t* scales = row_scales(w, row);
  const __m128i twice_e2m1 = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const int64_t groups = w.cols / kNvfp4GroupSize;
  const float* e4m3 = e4m3_lut();
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  for (int64_t g = 0; g < groups; ++g) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * g));
    const __m128i lo = _mm_and_si128(bytes, low4);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
    const __m128i vals = _mm_shuffle_epi8(twice_e2m1, _mm_unpacklo_epi8(lo, hi));  // 16 x int8
    const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(vals));
    const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(vals, 8)));
    const float* xg = x + g * kNvfp4GroupSize;
    const __m256 sum = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xg + 8), _mm256_mul_ps(w0, _mm256_loadu_ps(xg)));
    const __m256 scale = _mm256_set1_ps(e4m3[scales[g]]);
    // Two accumulators alternate so consecutive groups do not wait on one FMA chain.
    if (g & 1) acc1 = _mm256_fmadd_ps(sum, scale, acc1);
    else acc0 = _mm256_fmadd_ps(sum, scale, acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1)) * (0.5f * w.global_scale);
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
  rowwise_matmul(row_dot_thunk, &w, w.rows, w.cols, bytes, x, n_tokens, y, pool);
}

}  // namespace zen::kernels
