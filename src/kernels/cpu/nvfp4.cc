// NVFP4 products. AVX2 path: fp_gemm.h's unscaled order over weights dequantized exactly as
// nvfp4_dequantize_row does (E2M1 via e2m1x16, times the group scale from group_scales; a NaN
// scale code, which checkpoints never hold, decodes to 480 there); NEON path: a row dot per
// output, each group's exact E2M1 values dotted in two chains, then scaled; scalar path:
// ref::nvfp4_row_dot per output.
#include "kernels/cpu/nvfp4.h"

#include <array>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/fp_gemm.h"
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>
#elif ZEN_HAVE_NEON
#include <arm_neon.h>
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
// c[g] = e4m3(scale[g]) * global_scale for a row's groups, rounded as nvfp4_dequantize_row
// rounds it: (E4M3 * 2^-8) * (global * 2^8) is the same real product.
ZEN_TARGET_AVX2 void group_scales(const Nvfp4Matrix& w, const uint8_t* scales, float* c) {
  const int64_t groups = w.cols / kNvfp4GroupSize;
  const __m256 global256 = _mm256_set1_ps(w.global_scale * 256.0f);
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) _mm256_storeu_ps(c + g, _mm256_mul_ps(e4m3x8_scaled(scales + g), global256));
  const float* e4m3 = e4m3_lut();
  for (; g < groups; ++g) c[g] = e4m3[scales[g]] * w.global_scale;
}

// 16 codes (one per byte, element order) -> their E2M1 values, exactly: a byte shuffle gives
// each value's f16 high byte (the low bytes of 0, 0.5, ..., 6 are zero; code 8 is +0 as in
// ModelOpt's table), F16C widens.
ZEN_TARGET_AVX2 inline void e2m1x16(__m128i codes, __m256* w0, __m256* w1) {
  const __m128i f16_high = _mm_setr_epi8(0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46, 0x00, static_cast<char>(0xB8),
                                         static_cast<char>(0xBC), static_cast<char>(0xBE), static_cast<char>(0xC0),
                                         static_cast<char>(0xC2), static_cast<char>(0xC4), static_cast<char>(0xC6));
  const __m128i high = _mm_shuffle_epi8(f16_high, codes);
  *w0 = _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), high));
  *w1 = _mm256_cvtph_ps(_mm_unpackhi_epi8(_mm_setzero_si128(), high));
}

// The codes of two consecutive groups (16 bytes, low nibble = even element), in element order.
ZEN_TARGET_AVX2 inline void split_two_groups(const uint8_t* p, __m128i* a, __m128i* b) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i lo = _mm_and_si128(bytes, low4), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
  *a = _mm_unpacklo_epi8(lo, hi);
  *b = _mm_unpackhi_epi8(lo, hi);
}

ZEN_TARGET_AVX2 inline __m128i split_one_group(const uint8_t* p) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm_unpacklo_epi8(_mm_and_si128(bytes, low4), _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
}

// y[r] for R rows from r0, one token, in the fp_gemm.h order; the rows share the x loads and
// give the FMA chains R-way independence. Weights: E2M1 * c[g], as nvfp4_dequantize_row.
template <int R>
ZEN_TARGET_AVX2 void gemv_rows(const Nvfp4Matrix& w, int64_t r0, const float* x, float* y) {
  const int64_t groups = w.cols / kNvfp4GroupSize;
  thread_local std::vector<float> scale_buffer;
  scale_buffer.resize(static_cast<size_t>(R * groups));
  const uint8_t* codes[R];
  const float* c[R];
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    codes[r] = row_codes(w, r0 + r);
    float* cr = scale_buffer.data() + r * groups;
    group_scales(w, row_scales(w, r0 + r), cr);
    c[r] = cr;
    acc[r] = _mm256_setzero_ps();
  }
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    // The R rows are R short streams; fetch the next R rows (contiguous after these) one line
    // per step, which covers them exactly by the end of this pass.
    if constexpr (R == 4) _mm_prefetch(reinterpret_cast<const char*>(codes[0] + R * (w.cols / 2) + R * 8 * g), _MM_HINT_T0);
    const float* xg = x + g * kNvfp4GroupSize;
    const __m256 x0 = _mm256_loadu_ps(xg), x1 = _mm256_loadu_ps(xg + 8), x2 = _mm256_loadu_ps(xg + 16),
                 x3 = _mm256_loadu_ps(xg + 24);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m128i ca, cb;
      split_two_groups(codes[r] + 8 * g, &ca, &cb);
      __m256 a0, a1, b0, b1;
      e2m1x16(ca, &a0, &a1);
      e2m1x16(cb, &b0, &b1);
      const __m256 sa = _mm256_broadcast_ss(c[r] + g), sb = _mm256_broadcast_ss(c[r] + g + 1);
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(a0, sa), x0, acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(a1, sa), x1, acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(b0, sb), x2, acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(b1, sb), x3, acc[r]);
    }
  }
  if (g < groups) {
    const float* xg = x + g * kNvfp4GroupSize;
    const __m256 x0 = _mm256_loadu_ps(xg), x1 = _mm256_loadu_ps(xg + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m256 a0, a1;
      e2m1x16(split_one_group(codes[r] + 8 * g), &a0, &a1);
      const __m256 sa = _mm256_broadcast_ss(c[r] + g);
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(a0, sa), x0, acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(a1, sa), x1, acc[r]);
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
  const int64_t groups = w.cols / kNvfp4GroupSize;
  thread_local std::vector<float> c;
  c.resize(static_cast<size_t>(groups));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* codes = row_codes(w, r0 + i);
    group_scales(w, row_scales(w, r0 + i), c.data());
    float* out = panel + i * w.cols;  // cols is a multiple of 16: no padding
    for (int64_t g = 0; g < groups; ++g) {
      __m256 w0, w1;
      e2m1x16(split_one_group(codes + 8 * g), &w0, &w1);
      const __m256 s = _mm256_set1_ps(c[static_cast<size_t>(g)]);
      _mm256_storeu_ps(out + g * kNvfp4GroupSize, _mm256_mul_ps(w0, s));
      _mm256_storeu_ps(out + g * kNvfp4GroupSize + 8, _mm256_mul_ps(w1, s));
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

#if ZEN_HAVE_NEON
// The 16 codes of a group (8 bytes, low nibble = even element) -> their E2M1 values, exactly:
// a table lookup gives each value's f16 high byte (as e2m1x16 on x86), FCVTL widens.
inline void e2m1x16_neon(const uint8_t* p, float32x4_t* w) {
  static const uint8_t kF16High[16] = {0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46,
                                       0x00, 0xB8, 0xBC, 0xBE, 0xC0, 0xC2, 0xC4, 0xC6};
  const uint8x8_t bytes = vld1_u8(p);
  const uint8x8x2_t codes = vzip_u8(vand_u8(bytes, vdup_n_u8(0x0F)), vshr_n_u8(bytes, 4));  // element order
  const uint8x16_t high = vqtbl1q_u8(vld1q_u8(kF16High), vcombine_u8(codes.val[0], codes.val[1]));
  const uint8x16_t zero = vdupq_n_u8(0);
  const float16x8_t h0 = vreinterpretq_f16_u8(vzip1q_u8(zero, high)), h1 = vreinterpretq_f16_u8(vzip2q_u8(zero, high));
  w[0] = vcvt_f32_f16(vget_low_f16(h0));
  w[1] = vcvt_high_f32_f16(h0);
  w[2] = vcvt_f32_f16(vget_low_f16(h1));
  w[3] = vcvt_high_f32_f16(h1);
}

// One row: per group of 16 two 4-lane FMA chains over the E2M1 values, summed and folded with
// the group scale (E4M3 times the global scale, as nvfp4_dequantize_row rounds it).
float nvfp4_row_dot_neon(const Nvfp4Matrix& w, int64_t row, const float* x) {
  const uint8_t* codes = row_codes(w, row);
  const uint8_t* scales = row_scales(w, row);
  const float* e4m3 = e4m3_lut();
  float total = 0.0f;
  for (int64_t g = 0; g < w.cols / kNvfp4GroupSize; ++g) {
    float32x4_t v[4];
    e2m1x16_neon(codes + 8 * g, v);
    const float* xg = x + g * kNvfp4GroupSize;
    float32x4_t a0 = vmulq_f32(v[0], vld1q_f32(xg)), a1 = vmulq_f32(v[1], vld1q_f32(xg + 4));
    a0 = vfmaq_f32(a0, v[2], vld1q_f32(xg + 8));
    a1 = vfmaq_f32(a1, v[3], vld1q_f32(xg + 12));
    total = std::fma(vaddvq_f32(vaddq_f32(a0, a1)), e4m3[scales[g]] * w.global_scale, total);
  }
  return total;
}
#endif

float nvfp4_row_dot(const Nvfp4Matrix& w, int64_t row, const float* x) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return nvfp4_row_dot_avx2(w, row, x);
#elif ZEN_HAVE_NEON
  if (use_neon()) return nvfp4_row_dot_neon(w, row, x);
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
