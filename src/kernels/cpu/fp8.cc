// FP8 decodes and FP8 weight x f32 activation products.
//
// AVX2: the E4M3 bytes become f32 bit patterns with integer shifts (value times 2^-120, see
// segment_scales) against activations taken times 2^64, in the fp_gemm.h chains; each scale
// block's partial sums are folded with its scale. NaN encodings (0x7F, 0xFF) are not
// reproduced by this path (they decode to +-480); checkpoints never store them and the scalar
// path still returns NaN.
#include "kernels/cpu/fp8.h"

#include "base/numeric.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/fp_gemm.h"
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>
#elif ZEN_HAVE_NEON
#include <arm_neon.h>
#endif

namespace zen::kernels {

namespace ref {

// One definition of the formats for the whole engine: base/numeric.h (also used by the KV
// cache's encoder); the exhaustive test checks them against torch's tables.
float e4m3_decode(uint8_t b) { return fp8_e4m3_to_f32(b); }
float e5m2_decode(uint8_t b) { return fp8_e5m2_to_f32(b); }

}  // namespace ref

namespace {

using Table = std::array<float, 256>;

Table make_table(float (*decode)(uint8_t)) {
  Table t{};
  for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = decode(static_cast<uint8_t>(i));
  return t;
}

const Table& e4m3_table() {
  static const Table t = make_table(ref::e4m3_decode);
  return t;
}

const Table& e5m2_table() {
  static const Table t = make_table(ref::e5m2_decode);
  return t;
}

// The scales of row `row`'s tile row: [scale_cols()].
const float* row_scales(const Fp8Matrix& w, int64_t row) { return w.scales + (row / w.block_rows) * w.scale_cols(); }

#if ZEN_HAVE_X86_SIMD
// True when no 8-column chunk straddles two scale blocks: the kernels then keep the E4M3
// values unscaled in the chains and apply each block's scale to the block's partial sums
// (fp_gemm.h's segmented order). Otherwise (odd block widths) they run over the exactly
// dequantized weights and the activations as they are (the unscaled order).
bool segmented(const Fp8Matrix& w) { return w.block_cols % 8 == 0 || w.block_cols >= w.cols; }

// Segmented chains hold E4M3 values as f32 bit patterns made with integer shifts, which is
// cheaper than widening through f16 (F16C's conversion is the slow step): the byte at the top
// of a 32-bit lane, shifted right arithmetically by 4, has the E4M3 exponent and mantissa in
// the low bits of the f32 exponent and the top of its mantissa; the mask clears the copies of
// the sign and keeps bit 31. That f32 is the E4M3 value times 2^-120, exactly (subnormal E4M3
// become f32 denormals; NaN codes read as +-480, which checkpoints never hold). The activations
// are taken times 2^64 (exact), so every product w' x' = w x 2^-56 stays in the normal range,
// and the block scales carry the remaining 2^56.
constexpr int kActivationExponent = 64;
constexpr float kSegmentScaleFactor = 72057594037927936.0f;  // 2^56 = 2^(120 - 64)

// 8 E4M3 bytes, in order, as lanes of value times 2^-120.
ZEN_TARGET_AVX2 inline __m256 e4m3x8_f32(const uint8_t* p) {
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(
      _mm256_and_si256(_mm256_srai_epi32(_mm256_slli_epi32(b, 24), 4), _mm256_set1_epi32(static_cast<int>(0x87FFFFFFu))));
}

// The last n (< 8) bytes of a row, zero-padded (never reads past the row).
ZEN_TARGET_AVX2 inline __m256 e4m3x8_f32_tail(const uint8_t* p, int64_t n) {
  uint8_t padded[8] = {};
  std::copy(p, p + n, padded);
  return e4m3x8_f32(padded);
}

// 32 E4M3 bytes as 4 x 8 lanes in the chunk order of chunk32_element: register j lane l holds
// element 4j + l (l < 4) or 16 + 4j + (l - 4), each 128-bit half shuffled from its own bytes.
ZEN_TARGET_AVX2 inline void e4m3x32_f32(const uint8_t* p, __m256* w) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(0x87FFFFFFu));
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const char z = -1, b0 = static_cast<char>(4 * j), b1 = static_cast<char>(4 * j + 1);
    const char b2 = static_cast<char>(4 * j + 2), b3 = static_cast<char>(4 * j + 3);
    const __m256i top = _mm256_setr_epi8(z, z, z, b0, z, z, z, b1, z, z, z, b2, z, z, z, b3,  //
                                         z, z, z, b0, z, z, z, b1, z, z, z, b2, z, z, z, b3);
    w[j] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(b, top), 4), mask));
  }
}

// Which element of a 32-column chunk sits at position i (= 8j + l) of the chains' order.
constexpr int chunk32_element(int i) { return (i % 8 < 4) ? 4 * (i / 8) + i % 8 : 16 + 4 * (i / 8) + i % 8 - 4; }

// The chains' columns of one row: per scale block, its whole 32-column chunks in
// chunk32_element order, then the rest in order. fn(first_column, is_chunk32) per step of 32
// or 8 columns (the last step of a block may be partial).
template <typename Fn>
void for_each_step(const Fp8Matrix& w, Fn&& fn) {
  for (int64_t k0 = 0; k0 < w.cols; k0 += w.block_cols) {
    const int64_t k1 = std::min(w.cols, k0 + w.block_cols);
    int64_t i = k0;
    for (; i + 32 <= k1; i += 32) fn(i, true);
    for (; i < k1; i += 8) fn(i, false);
  }
}

// Activations as the segmented chains read them: x' [n_tokens, cols] = x times 2^64, each
// whole 32-column chunk of a scale block permuted to chunk32_element order.
void chain_activations(const Fp8Matrix& w, const float* x, int64_t n_tokens, float* out) {
  const float f = std::ldexp(1.0f, kActivationExponent);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * w.cols;
    float* ot = out + t * w.cols;
    for_each_step(w, [&](int64_t i, bool chunk32) {
      if (chunk32) {
        for (int e = 0; e < 32; ++e) ot[i + e] = xt[i + chunk32_element(e)] * f;
      } else {
        for (int64_t e = i; e < std::min(w.cols, i + 8); ++e) ot[e] = xt[e] * f;
      }
    });
  }
}

// Per-thread activations buffer (kept between calls: allocating prefill-sized buffers on every
// matmul would fault fresh pages each time).
float* chain_activations_buffer(size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

// Row `row`'s panel values into out[padded_cols(cols)], tail zero: the chains' values and
// order when segmented, else the dequantized weights in order.
ZEN_TARGET_AVX2 void decode_row(const Fp8Matrix& w, int64_t row, float* out) {
  const uint8_t* wr = w.data + static_cast<size_t>(row) * static_cast<size_t>(w.cols);
  const int64_t kp = padded_cols(w.cols);
  if (!segmented(w)) {
    fp8_dequantize_row(w, row, out);
    std::fill(out + w.cols, out + kp, 0.0f);
    return;
  }
  for_each_step(w, [&](int64_t i, bool chunk32) ZEN_TARGET_AVX2 {
    if (chunk32) {
      __m256 v[4];
      e4m3x32_f32(wr + i, v);
      for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + i + 8 * j, v[j]);
    } else {
      _mm256_storeu_ps(out + i, w.cols - i >= 8 ? e4m3x8_f32(wr + i) : e4m3x8_f32_tail(wr + i, w.cols - i));
    }
  });
}

// The row's block scales times 2^56 (see kActivationExponent): out[scale_cols()].
void segment_scales(const void* ctx, int64_t row, float* out) {
  const auto& w = *static_cast<const Fp8Matrix*>(ctx);
  const float* scales = row_scales(w, row);
  for (int64_t cb = 0; cb < w.scale_cols(); ++cb) out[cb] = scales[cb] * kSegmentScaleFactor;
}

ZEN_TARGET_AVX2 void decode_panel_avx2(const void* ctx, int64_t r0, int64_t n, float* panel) {
  const auto& w = *static_cast<const Fp8Matrix*>(ctx);
  for (int64_t i = 0; i < n; ++i) decode_row(w, r0 + i, panel + i * padded_cols(w.cols));
}

// y[r] for R rows from r0, one token x' (chain_activations), in fp_gemm.h's segmented order
// over the chains' columns (requires segmented()); the rows share the x' loads and give the
// FMA chains R-way independence.
template <int R>
ZEN_TARGET_AVX2 void gemv_rows(const Fp8Matrix& w, int64_t r0, const float* x, float* y) {
  const uint8_t* wr[R];
  const float* scales[R];
  __m256 total[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    wr[r] = w.data + static_cast<size_t>(r0 + r) * static_cast<size_t>(w.cols);
    scales[r] = row_scales(w, r0 + r);
    total[r] = _mm256_setzero_ps();
  }
  int64_t cb = 0;
  for (int64_t k0 = 0; k0 < w.cols; k0 += w.block_cols, ++cb) {
    const int64_t k1 = std::min(w.cols, k0 + w.block_cols);
    __m256 acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    int64_t i = k0;
    for (; i + 32 <= k1; i += 32) {
      if constexpr (R == 4) {  // the next R rows (contiguous after these), two lines per row per step
        _mm_prefetch(reinterpret_cast<const char*>(wr[0] + R * w.cols + R * i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wr[0] + R * w.cols + R * i + 64), _MM_HINT_T0);
      }
      const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
      const __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        __m256 v[4];
        e4m3x32_f32(wr[r] + i, v);
        acc[r] = _mm256_fmadd_ps(v[0], x0, acc[r]);
        acc[r] = _mm256_fmadd_ps(v[1], x1, acc[r]);
        acc[r] = _mm256_fmadd_ps(v[2], x2, acc[r]);
        acc[r] = _mm256_fmadd_ps(v[3], x3, acc[r]);
      }
    }
    for (; i + 8 <= k1; i += 8) {
      const __m256 xv = _mm256_loadu_ps(x + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(e4m3x8_f32(wr[r] + i), xv, acc[r]);
    }
    if (i < k1) {  // the row's last, partial chunk
      const __m256 xv = _mm256_maskload_ps(x + i, tail_mask(k1 - i));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(e4m3x8_f32_tail(wr[r] + i, k1 - i), xv, acc[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      total[r] = _mm256_fmadd_ps(acc[r], _mm256_set1_ps(scales[r][cb] * kSegmentScaleFactor), total[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y[r] = hsum(total[r]);  // y: [R]
}

// One row through a decoded copy (odd block widths), same order as the panel tiles.
ZEN_TARGET_AVX2 float decoded_row_dot(const Fp8Matrix& w, int64_t row, const float* x) {
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>(padded_cols(w.cols)));
  decode_row(w, row, buf.data());
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= w.cols; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(buf.data() + i), _mm256_loadu_ps(x + i), acc);
  if (i < w.cols)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(buf.data() + i), _mm256_maskload_ps(x + i, tail_mask(w.cols - i)), acc);
  return hsum(acc);
}

// x: the activations as given when not segmented, else x' (chain_activations).
ZEN_TARGET_AVX2 void gemv_avx2(const void* ctx, int64_t r0, int64_t r1, const float* x, float* y) {
  const auto& w = *static_cast<const Fp8Matrix*>(ctx);
  if (!segmented(w)) {
    for (int64_t r = r0; r < r1; ++r) y[r] = decoded_row_dot(w, r, x);
    return;
  }
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) gemv_rows<4>(w, r, x, y + r);
  for (; r < r1; ++r) gemv_rows<1>(w, r, x, y + r);
}

ZEN_TARGET_AVX2 float fp8_row_dot_avx2(const Fp8Matrix& w, int64_t row, const float* x) {
  if (!segmented(w)) return decoded_row_dot(w, row, x);
  float* xc = chain_activations_buffer(static_cast<size_t>(w.cols));
  chain_activations(w, x, 1, xc);
  float y = 0.0f;
  gemv_rows<1>(w, row, xc, &y);
  return y;
}
#endif

#if ZEN_HAVE_NEON
// 8 E4M3 bytes -> two 4-lane f32 vectors of the values times 2^-8: each byte in the high half
// of a 16-bit lane, shifted right arithmetically by one with the sign copy cleared, is the
// f16 whose exponent bias is 15 instead of 7 (subnormals included); FCVTL widens it exactly.
inline void e4m3x8_neon(const uint8_t* p, float32x4_t* lo, float32x4_t* hi) {
  const int16x8_t h = vshlq_n_s16(vreinterpretq_s16_u16(vmovl_u8(vld1_u8(p))), 8);
  const uint16x8_t bits = vandq_u16(vreinterpretq_u16_s16(vshrq_n_s16(h, 1)), vdupq_n_u16(0xBFFF));
  const float16x8_t f = vreinterpretq_f16_u16(bits);
  *lo = vcvt_f32_f16(vget_low_f16(f));
  *hi = vcvt_high_f32_f16(f);
}

// One row: per scale block two 4-lane FMA chains over the E4M3 values times 2^-8, summed and
// folded with the block scale times 2^8; the block's last < 8 columns go through a padded copy.
float fp8_row_dot_neon(const Fp8Matrix& w, int64_t row, const float* x) {
  const uint8_t* wr = w.data + static_cast<size_t>(row) * static_cast<size_t>(w.cols);
  const float* scales = row_scales(w, row);
  float total = 0.0f;
  int64_t cb = 0;
  for (int64_t k0 = 0; k0 < w.cols; k0 += w.block_cols, ++cb) {
    const int64_t k1 = std::min(w.cols, k0 + w.block_cols);
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
    int64_t i = k0;
    for (; i + 8 <= k1; i += 8) {
      float32x4_t lo, hi;
      e4m3x8_neon(wr + i, &lo, &hi);
      a0 = vfmaq_f32(a0, lo, vld1q_f32(x + i));
      a1 = vfmaq_f32(a1, hi, vld1q_f32(x + i + 4));
    }
    float block = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < k1; ++i) block += e4m3_table()[wr[i]] / 256.0f * x[i];
    total += block * (scales[cb] * 256.0f);
  }
  return total;
}
#endif

float row_dot_thunk(const void* ctx, int64_t row, const float* x) {
  return fp8_row_dot(*static_cast<const Fp8Matrix*>(ctx), row, x);
}

constexpr int64_t kRowTile = 16;    // weight rows kept hot while a token tile passes over them
constexpr int64_t kTokenTile = 64;  // tokens per pass; bounds the activation working set
constexpr size_t kMinParallelBytes = size_t{64} << 10;  // below this, waking the pool costs more

}  // namespace

float e4m3_to_f32(uint8_t b) { return e4m3_table()[b]; }
const float* e4m3_lut() { return e4m3_table().data(); }
float e5m2_to_f32(uint8_t b) { return e5m2_table()[b]; }
const float* e5m2_lut() { return e5m2_table().data(); }

namespace {

#if ZEN_HAVE_X86_SIMD
// Bit i set when byte i of the 32 at p is a NaN code: 0x7F / 0xFF for E4M3; for E5M2 the
// codes above 0x7C of either sign.
ZEN_TARGET_AVX2 inline uint32_t nan_codes32(const uint8_t* p, bool e5m2) {
  const __m256i b = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_set1_epi8(0x7F));
  const __m256i nan =
      e5m2 ? _mm256_cmpgt_epi8(b, _mm256_set1_epi8(0x7C)) : _mm256_cmpeq_epi8(b, _mm256_set1_epi8(0x7F));
  return static_cast<uint32_t>(_mm256_movemask_epi8(nan));
}

// Rows of FP8 codes to f32, equal to the tables bit for bit: E4M3 through the shift trick of
// e4m3x8_f32 times 2^120 (exact, denormals included), E5M2 as the high byte of an f16.
// Chunks holding a NaN code, and the tail, go through the table.
ZEN_TARGET_AVX2 void decode_fp8_avx2(const uint8_t* src, float* out, int64_t n, bool e5m2, const Table& t) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (nan_codes32(src + i, e5m2) != 0) {  // never in a KV cache (the encoder saturates)
      for (int64_t j = i; j < i + 32; ++j) out[j] = t[src[j]];
      continue;
    }
#pragma GCC unroll 4
    for (int64_t j = i; j < i + 32; j += 8) {
      __m256 v;
      if (e5m2) {
        const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + j)));
        v = _mm256_cvtph_ps(_mm_slli_epi16(b, 8));
      } else {
        v = _mm256_mul_ps(e4m3x8_f32(src + j), _mm256_set1_ps(0x1p120f));
      }
      _mm256_storeu_ps(out + j, v);
    }
  }
  for (; i < n; ++i) out[i] = t[src[i]];
}
#endif

void decode_fp8(const uint8_t* src, float* out, int64_t n, bool e5m2) {
  const Table& t = e5m2 ? e5m2_table() : e4m3_table();
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return decode_fp8_avx2(src, out, n, e5m2, t);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = t[src[i]];
}

}  // namespace

void dequantize_e4m3(const uint8_t* src, float* out, int64_t n) { decode_fp8(src, out, n, false); }
void dequantize_e5m2(const uint8_t* src, float* out, int64_t n) { decode_fp8(src, out, n, true); }

float ref::dot_e4m3(const uint8_t* w, const float* x, int64_t n) {
  const Table& t = e4m3_table();
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += t[w[i]] * x[i];
  return sum;
}

float ref::fp8_row_dot(const Fp8Matrix& w, int64_t row, const float* x) {
  const uint8_t* wr = w.data + static_cast<size_t>(row) * static_cast<size_t>(w.cols);
  const float* scales = row_scales(w, row);
  float acc = 0.0f;
  int64_t cb = 0;
  for (int64_t k0 = 0; k0 < w.cols; k0 += w.block_cols, ++cb) {
    const int64_t len = std::min(w.block_cols, w.cols - k0);
    acc += dot_e4m3(wr + k0, x + k0, len) * scales[cb];
  }
  return acc;
}

float fp8_row_dot(const Fp8Matrix& w, int64_t row, const float* x) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return fp8_row_dot_avx2(w, row, x);
#elif ZEN_HAVE_NEON
  if (use_neon()) return fp8_row_dot_neon(w, row, x);
#endif
  return ref::fp8_row_dot(w, row, x);
}

void fp8_dequantize_row(const Fp8Matrix& w, int64_t row, float* out) {
  const uint8_t* wr = w.data + static_cast<size_t>(row) * static_cast<size_t>(w.cols);
  const float* scales = row_scales(w, row);
  const Table& t = e4m3_table();
  for (int64_t k = 0; k < w.cols; ++k) out[k] = t[wr[k]] * scales[k / w.block_cols];
}

void fp8_matmul(const Fp8Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) {
    FpGemmFormat f{&w, w.rows, w.cols, static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols),
                   decode_panel_avx2, gemv_avx2};
    if (!segmented(w)) return fp_gemm_avx2(f, x, n_tokens, y, pool);
    f.segment = w.block_cols;
    f.segment_scales = segment_scales;
    float* xc = chain_activations_buffer(static_cast<size_t>(n_tokens * w.cols));
    chain_activations(w, x, n_tokens, xc);
    return fp_gemm_avx2(f, xc, n_tokens, y, pool);
  }
#endif
  rowwise_matmul(row_dot_thunk, &w, w.rows, w.cols, static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols), x,
                 n_tokens, y, pool);
}

void rowwise_matmul(RowDotFn row_dot, const void* ctx, int64_t rows, int64_t cols, size_t weight_bytes,
                    const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  if (n_tokens <= 0 || rows <= 0) return;
  auto run = [&](int64_t r0, int64_t r1) {
    if (n_tokens == 1) {
      for (int64_t r = r0; r < r1; ++r) y[r] = row_dot(ctx, r, x);
      return;
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
      const int64_t t1 = std::min(n_tokens, t0 + kTokenTile);
      for (int64_t rb = r0; rb < r1; rb += kRowTile) {
        const int64_t re = std::min(r1, rb + kRowTile);
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t r = rb; r < re; ++r) y[t * rows + r] = row_dot(ctx, r, x + t * cols);
      }
    }
  };
  if (weight_bytes * static_cast<size_t>(n_tokens) < kMinParallelBytes) return run(0, rows);
  pool.parallel_for(rows, [&run](int64_t r0, int64_t r1, int) { run(r0, r1); }, n_tokens == 1 ? 8 : kRowTile);
}

}  // namespace zen::kernels
