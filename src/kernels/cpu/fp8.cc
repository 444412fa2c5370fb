// FP8 decodes and FP8 weight x f32 activation products.
//
// AVX2 decode of E4M3: the 7 magnitude bits shifted left by 7 form an f16 whose exponent bias
// is 15 instead of 7, i.e. the f16 equals the E4M3 value times 2^-8 (subnormals included), so
// F16C widens 8 values with one instruction; the 2^-8 is undone exactly by taking the block
// scales times 2^8. Products: fp_gemm.h (scales applied per block to partial sums). NaN encodings
// (0x7F, 0xFF) are not reproduced by this path (they decode to +-480); checkpoints never store
// them and the scalar path still returns NaN.
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
// values unscaled (times 2^-8) in the chains and apply each block's scale (times 2^8) to the
// block's partial sums (fp_gemm.h's segmented order). Otherwise (odd block widths) they run
// over the exactly dequantized weights (the unscaled order).
bool segmented(const Fp8Matrix& w) { return w.block_cols % 8 == 0 || w.block_cols >= w.cols; }

// The 8 (or, at the row's end, `n` < 8 then zeros) E4M3 values at `p`, times 2^-8.
ZEN_TARGET_AVX2 inline __m256 e4m3x8_tail(const uint8_t* p, int64_t n) {
  if (n >= 8) return e4m3x8_scaled(p);
  uint8_t padded[8] = {};
  std::copy(p, p + n, padded);
  return e4m3x8_scaled(padded);
}

// Row `row`'s panel values into out[padded_cols(cols)], tail zero: E4M3 * 2^-8 when
// segmented, else the dequantized weights.
ZEN_TARGET_AVX2 void decode_row(const Fp8Matrix& w, int64_t row, float* out) {
  const uint8_t* wr = w.data + static_cast<size_t>(row) * static_cast<size_t>(w.cols);
  const int64_t kp = padded_cols(w.cols);
  if (!segmented(w)) {
    fp8_dequantize_row(w, row, out);
    std::fill(out + w.cols, out + kp, 0.0f);
    return;
  }
  int64_t i = 0;
  for (; i + 16 <= w.cols; i += 16) {
    __m256 w0, w1;
    e4m3x16_scaled(wr + i, &w0, &w1);
    _mm256_storeu_ps(out + i, w0);
    _mm256_storeu_ps(out + i + 8, w1);
  }
  for (; i < w.cols; i += 8) _mm256_storeu_ps(out + i, e4m3x8_tail(wr + i, w.cols - i));
}

// The row's block scales times 2^8 (undoing the decode's 2^-8 exactly): out[scale_cols()].
void segment_scales(const void* ctx, int64_t row, float* out) {
  const auto& w = *static_cast<const Fp8Matrix*>(ctx);
  const float* scales = row_scales(w, row);
  for (int64_t cb = 0; cb < w.scale_cols(); ++cb) out[cb] = scales[cb] * 256.0f;
}

ZEN_TARGET_AVX2 void decode_panel_avx2(const void* ctx, int64_t r0, int64_t n, float* panel) {
  const auto& w = *static_cast<const Fp8Matrix*>(ctx);
  for (int64_t i = 0; i < n; ++i) decode_row(w, r0 + i, panel + i * padded_cols(w.cols));
}

// y[r] for R rows from r0, one token, in fp_gemm.h's segmented order (requires segmented());
// the rows share the x loads and give the FMA chains R-way independence.
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
      if constexpr (R == 4) {  // as below: the next rows, one line per row per step
        _mm_prefetch(reinterpret_cast<const char*>(wr[0] + R * w.cols + R * i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wr[0] + R * w.cols + R * i + 64), _MM_HINT_T0);
      }
      const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
      const __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        __m256 w[4];
        e4m3x32_scaled(wr[r] + i, w);
        acc[r] = _mm256_fmadd_ps(w[0], x0, acc[r]);
        acc[r] = _mm256_fmadd_ps(w[1], x1, acc[r]);
        acc[r] = _mm256_fmadd_ps(w[2], x2, acc[r]);
        acc[r] = _mm256_fmadd_ps(w[3], x3, acc[r]);
      }
    }
    for (; i + 16 <= k1; i += 16) {
      // The R rows are R short streams; fetch the next R rows (contiguous after these) one
      // line per step, which covers them exactly by the end of this pass.
      if constexpr (R == 4) _mm_prefetch(reinterpret_cast<const char*>(wr[0] + R * w.cols + R * i), _MM_HINT_T0);
      const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        __m256 w0, w1;
        e4m3x16_scaled(wr[r] + i, &w0, &w1);
        acc[r] = _mm256_fmadd_ps(w0, x0, acc[r]);
        acc[r] = _mm256_fmadd_ps(w1, x1, acc[r]);
      }
    }
    for (; i + 8 <= k1; i += 8) {
      const __m256 xv = _mm256_loadu_ps(x + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(e4m3x8_scaled(wr[r] + i), xv, acc[r]);
    }
    if (i < k1) {  // the row's last, partial chunk
      const __m256 xv = _mm256_maskload_ps(x + i, tail_mask(k1 - i));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(e4m3x8_tail(wr[r] + i, k1 - i), xv, acc[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) total[r] = _mm256_fmadd_ps(acc[r], _mm256_set1_ps(scales[r][cb] * 256.0f), total[r]);
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
  float y = 0.0f;
  gemv_rows<1>(w, row, x, &y);
  return y;
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
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) {
    FpGemmFormat f{&w, w.rows, w.cols, static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols),
                   decode_panel_avx2, gemv_avx2};
    if (segmented(w)) {
      f.segment = w.block_cols;
      f.segment_scales = segment_scales;
    }
    return fp_gemm_avx2(f, x, n_tokens, y, pool);
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
