// AVX2 products of dequantized-on-the-fly weight matrices (FP8, NVFP4) with f32 activations.
//
// One accumulation order for every output, whatever the batch size or thread count:
//   y[t, n] = hsum(acc), acc (8 lanes) = fma chain over k-chunks c = 0, 1, ...:
//             acc = fma(W[n, 8c .. 8c+8), x[t, 8c .. 8c+8), acc)
// where W is the exact dequantized weight (the f32 the format's dequantize_row writes) and the
// last chunk is zero-padded. Decode (T = 1) runs that chain straight from the packed weights
// (the format's gemv); prefill dequantizes a tile of rows into a per-thread f32 panel once and
// runs register-blocked tiles (4 rows x 3 tokens) of the same chains over it, so both give
// bit-identical y[t, n].
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
};

inline int64_t padded_cols(int64_t cols) { return (cols + 7) / 8 * 8; }

#if ZEN_HAVE_X86_SIMD
// y[t, n] for every token and row; requires AVX2 (callers check use_avx2()).
void fp_gemm_avx2(const FpGemmFormat& f, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Lane mask selecting the first `n` (0 < n < 8) lanes of a chunk.
ZEN_TARGET_AVX2 inline __m256i tail_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

}  // namespace zen::kernels
