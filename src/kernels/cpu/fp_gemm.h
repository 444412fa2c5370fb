// AVX2 products of dequantized-on-the-fly weight matrices (FP8, NVFP4) with f32 activations.
//
// One accumulation order for every output, whatever the batch size or thread count:
//   acc (8 lanes) = fma chain over k-chunks c = 0, 1, ...: acc = fma(W[n, 8c .. 8c+8), x[t, ..], acc)
// where W is the format's panel value of the weight and the last chunk is zero-padded; then
//   unscaled formats (no segment scales):  y[t, n] = hsum(acc) over the whole row;
//   segmented formats: one such chain per segment of `segment` columns (a multiple of 8),
//                      total = fma(acc_segment, scale[n, segment], total) lane-wise, y = hsum(total).
// Decode (T = 1) runs those chains straight from the packed weights (the format's gemv);
// prefill decodes a tile of rows into a per-thread f32 panel once and runs register-blocked
// tiles (4 rows x 3 tokens) of the same chains over it, so both give bit-identical y[t, n].
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/cpu/simd.h"

namespace zen::kernels {

struct FpGemmFormat {
  const void* ctx = nullptr;
  int64_t rows = 0, cols = 0;
  size_t weight_bytes = 0;  // bytes streamed per full pass (decides whether to go parallel)
  // Rows [r0, r0 + n) dequantized into panel [n, padded_cols(cols)], tail columns zero.
  void (*decode_panel)(const void* ctx, int64_t r0, int64_t n, float* panel) = nullptr;
  // y[r] for r in [r0, r1) with one token x [cols], in the order above.
  void (*gemv)(const void* ctx, int64_t r0, int64_t r1, const float* x, float* y) = nullptr;
  // Segmented formats: columns per segment and the row's scales out[ceil(cols / segment)].
  int64_t segment = 0;
  void (*segment_scales)(const void* ctx, int64_t row, float* out) = nullptr;
};

inline int64_t padded_cols(int64_t cols) { return (cols + 7) / 8 * 8; }

#if ZEN_HAVE_X86_SIMD
// y[t, n] for every token and row; requires AVX2 (callers check use_avx2()).
void fp_gemm_avx2(const FpGemmFormat& f, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Lane mask selecting the first `n` (0 < n < 8) lanes of a chunk.
ZEN_TARGET_AVX2 inline __m256i tail_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// E4M3 byte b in a 16-bit lane -> the f16 bits sign << 15 | magnitude << 7: (b << 8) shifted
// right arithmetically by one puts the magnitude in place and copies the sign into bit 14,
// which the mask clears.
// 8 E4M3 bytes -> 8 floats equal to the E4M3 values times 2^-8.
ZEN_TARGET_AVX2 inline __m256 e4m3x8_scaled(const uint8_t* p) {
  const __m128i b8 = _mm_unpacklo_epi8(_mm_setzero_si128(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(b8, 1), _mm_set1_epi16(static_cast<short>(0xBFFF))));
}

// 16 E4M3 bytes -> 2 x 8 floats equal to the E4M3 values times 2^-8.
ZEN_TARGET_AVX2 inline void e4m3x16_scaled(const uint8_t* p, __m256* lo, __m256* hi) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(b, 8), 1),
                                     _mm256_set1_epi16(static_cast<short>(0xBFFF)));
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// 32 E4M3 bytes -> 4 x 8 floats (elements 0-7, 8-15, 16-23, 24-31) equal to the values times
// 2^-8. Unpacking against zero puts each byte in the high half of a 16-bit lane directly; the
// in-lane order of the 256-bit unpacks is undone by which 128-bit half each chunk comes from.
ZEN_TARGET_AVX2 inline void e4m3x32_scaled(const uint8_t* p, __m256* w) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i keep = _mm256_set1_epi16(static_cast<short>(0xBFFF));
  const __m256i lo = _mm256_and_si256(_mm256_srai_epi16(_mm256_unpacklo_epi8(_mm256_setzero_si256(), b), 1), keep);
  const __m256i hi = _mm256_and_si256(_mm256_srai_epi16(_mm256_unpackhi_epi8(_mm256_setzero_si256(), b), 1), keep);
  w[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(lo));       // elements 0-7
  w[1] = _mm256_cvtph_ps(_mm256_castsi256_si128(hi));       // 8-15
  w[2] = _mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1));  // 16-23
  w[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1));  // 24-31
}
#endif

}  // namespace zen::kernels
