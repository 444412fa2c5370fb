#include "kernels/cpu/bf16_gemm.h"

#include <cstring>

#include "base/error.h"
#include "kernels/cpu/fp_gemm.h"
#include "kernels/cpu/simd.h"

namespace zen::kernels {
#if ZEN_HAVE_X86_SIMD
namespace {

struct Bf16Matrix {
  const uint16_t* data;  // [rows, cols]
  int64_t rows, cols;
  const uint16_t* row(int64_t r) const { return data + r * cols; }
};

// 8 bf16 values -> 8 floats (exact).
ZEN_TARGET_AVX2 inline __m256 bf16x8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// The last n (< 8) values of a row, zero-padded to a chunk (never reads past the row).
ZEN_TARGET_AVX2 inline __m256 bf16_tail(const uint16_t* p, int64_t n) {
  uint16_t tmp[8] = {};
  std::memcpy(tmp, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return bf16x8(tmp);
}

ZEN_TARGET_AVX2 void decode_panel(const void* ctx, int64_t r0, int64_t n, float* panel) {
  const auto& w = *static_cast<const Bf16Matrix*>(ctx);
  const int64_t kp = padded_cols(w.cols);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* src = w.row(r0 + i);
    float* dst = panel + i * kp;
    int64_t k = 0;
    for (; k + 8 <= w.cols; k += 8) _mm256_storeu_ps(dst + k, bf16x8(src + k));
    if (k < w.cols) _mm256_storeu_ps(dst + k, bf16_tail(src + k, w.cols - k));
  }
}

// y[r] for R rows from r0, one token: fp_gemm.h's unsegmented chain per row.
template <int R>
ZEN_TARGET_AVX2 void gemv_rows(const Bf16Matrix& w, int64_t r0, const float* x, float* y) {
  const uint16_t* wr[R];
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    wr[r] = w.row(r0 + r);
    acc[r] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 8 <= w.cols; i += 8) {
    // The next R rows follow these: fetch them one line per step.
    if constexpr (R == 4) _mm_prefetch(reinterpret_cast<const char*>(wr[0] + R * w.cols + 4 * i), _MM_HINT_T0);
    const __m256 xv = _mm256_loadu_ps(x + i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(bf16x8(wr[r] + i), xv, acc[r]);
  }
  if (i < w.cols) {
    const __m256 xv = _mm256_maskload_ps(x + i, tail_mask(w.cols - i));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(bf16_tail(wr[r] + i, w.cols - i), xv, acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y[r] = hsum(acc[r]);
}

ZEN_TARGET_AVX2 void gemv(const void* ctx, int64_t r0, int64_t r1, const float* x, float* y) {
  const auto& w = *static_cast<const Bf16Matrix*>(ctx);
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) gemv_rows<4>(w, r, x, y + r);
  for (; r < r1; ++r) gemv_rows<1>(w, r, x, y + r);
}

}  // namespace

void bf16_matmul_avx2(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const Bf16Matrix m{reinterpret_cast<const uint16_t*>(w.data), w.rows(), w.cols()};
  const FpGemmFormat f{&m, m.rows, m.cols, static_cast<size_t>(m.rows * m.cols) * 2, decode_panel, gemv};
  fp_gemm_avx2(f, x, n_tokens, y, pool);
}
#else
void bf16_matmul_avx2(const TensorView& w, const float*, int64_t, float*, ThreadPool&) {
  fail("bf16_matmul_avx2 on '", w.name, "': this build has no x86 SIMD");
}
#endif

}  // namespace zen::kernels
