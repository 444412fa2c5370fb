// FP8 decodes and FP8 weight x f32 activation products.
//
// AVX2 decode of E4M3: the 7 magnitude bits shifted left by 7 form an f16 whose exponent bias
// is 15 instead of 7, i.e. the f16 equals the E4M3 value times 2^-8 (subnormals included), so
// F16C widens 8 values with one instruction and the dot product is rescaled by 2^8 at the end
// (exact: a power of two). NaN encodings (0x7F, 0xFF) are not reproduced by this path (they
// decode to +-480); checkpoints never store them and the scalar path still returns NaN.
#include "kernels/cpu/fp8.h"

#include "base/numeric.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>
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
// 16 E4M3 bytes -> 2 x 8 floats equal to the E4M3 values times 2^-8.
ZEN_TARGET_AVX2 inline void e4m3x16_scaled(const uint8_t* p, __m256* lo, __m256* hi) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8);
  const __m256i mag = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7F)), 7);
  const __m256i h = _mm256_or_si256(sign, mag);
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// 8 E4M3 bytes -> 8 floats equal to the E4M3 values times 2^-8.
ZEN_TARGET_AVX2 inline __m256 e4m3x8_scaled(const uint8_t* p) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8);
  const __m128i mag = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7F)), 7);
  return _mm256_cvtph_ps(_mm_or_si128(sign, mag));
}

ZEN_TARGET_AVX2 float dot_e4m3_avx2(const uint8_t* w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 w0, w1, w2, w3;
    e4m3x16_scaled(w + i, &w0, &w1);
    e4m3x16_scaled(w + i + 16, &w2, &w3);
    a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(e4m3x8_scaled(w + i), _mm256_loadu_ps(x + i), a0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) * 256.0f;
  const Table& t = e4m3_table();
  for (; i < n; ++i) sum += t[w[i]] * x[i];
  return sum;
}

ZEN_TARGET_AVX2 float fp8_row_dot_avx2(const Fp8Matrix& w, int64_t row, const float* x) {
  const uint8_t* wr = w.data + static_cast<size_t>(row) * static_cast<size_t>(w.cols);
  const float* scales = row_scales(w, row);
  float acc = 0.0f;
  int64_t cb = 0;
  for (int64_t k0 = 0; k0 < w.cols; k0 += w.block_cols, ++cb) {
    const int64_t len = std::min(w.block_cols, w.cols - k0);
    acc += dot_e4m3_avx2(wr + k0, x + k0, len) * scales[cb];
  }
  return acc;
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

void dequantize_e4m3(const uint8_t* src, float* out, int64_t n) {
  const Table& t = e4m3_table();
  for (int64_t i = 0; i < n; ++i) out[i] = t[src[i]];
}

void dequantize_e5m2(const uint8_t* src, float* out, int64_t n) {
  const Table& t = e5m2_table();
  for (int64_t i = 0; i < n; ++i) out[i] = t[src[i]];
}

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
