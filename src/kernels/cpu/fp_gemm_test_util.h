// The accumulation order of fp_gemm.h written out in scalar code, so tests can check the AVX2
// FP8 / NVFP4 products bit for bit against dequantized rows.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace zen::kernels::testing {

// 8 lanes, lane j = fma chain over k = j, j + 8, ... in order; then hsum's pairing:
// (l0 + l4, l1 + l5, l2 + l6, l3 + l7) -> (s0 + s2, s1 + s3) -> their sum.
inline float fp_gemm_order_dot(const float* w, const float* x, int64_t n) {
  float lane[8] = {};
  for (int64_t k = 0; k < n; ++k) lane[k % 8] = std::fma(w[k], x[k], lane[k % 8]);
  const float s0 = lane[0] + lane[4], s1 = lane[1] + lane[5], s2 = lane[2] + lane[6], s3 = lane[3] + lane[7];
  return (s0 + s2) + (s1 + s3);
}

// The segmented order: one 8-lane chain per `segment` columns (a multiple of 8), folded into
// lane totals with fma(chain, scales[segment], total), then hsum's pairing.
inline float fp_gemm_segmented_dot(const float* w, const float* x, int64_t n, int64_t segment, const float* scales) {
  float total[8] = {};
  for (int64_t k0 = 0, s = 0; k0 < n; k0 += segment, ++s) {
    float lane[8] = {};
    for (int64_t k = k0; k < std::min(n, k0 + segment); ++k) lane[k % 8] = std::fma(w[k], x[k], lane[k % 8]);
    for (int j = 0; j < 8; ++j) total[j] = std::fma(lane[j], scales[s], total[j]);
  }
  const float s0 = total[0] + total[4], s1 = total[1] + total[5], s2 = total[2] + total[6], s3 = total[3] + total[7];
  return (s0 + s2) + (s1 + s3);
}

}  // namespace zen::kernels::testing
