// The accumulation order of fp_gemm.h written out in scalar code, so tests can check the AVX2
// FP8 / NVFP4 products bit for bit against dequantized rows.
#pragma once
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

}  // namespace zen::kernels::testing
