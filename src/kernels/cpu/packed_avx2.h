// AVX2 kernels over row-interleaved weights (packed.h). Internal to kernels/cpu.
#pragma once
#include <cstddef>
#include <cstdint>

#include "io/tensor.h"

namespace zen::kernels::avx2 {

struct PackedProblem {
  DType dtype = DType::F32;  // the source dtype (selects the group layout)
  const uint8_t* weights = nullptr;
  size_t group_bytes = 0;
  int64_t n_groups = 0, n_blocks = 0;  // blocks per row
  const uint8_t* act = nullptr;        // [n_tokens][n_blocks] ActQ8, ActQ8K or ActNvfp4
  size_t act_row_bytes = 0;
  int64_t n_tokens = 0, n_rows = 0;
  float* y = nullptr;  // [n_tokens, n_rows]
  float out_scale = 1.0f;  // multiplies every finished sum (NVFP4's global scale)
};

// Computes rows 8*g0 .. 8*g1 (clipped to n_rows) for every token.
void packed_groups(const PackedProblem& p, int64_t g0, int64_t g1);

}  // namespace zen::kernels::avx2
