// Tiled dot-product kernels behind matmul. Internal to kernels/cpu.
#pragma once
#include <cstddef>
#include <cstdint>

#include "io/tensor.h"
#include "kernels/cpu/quant.h"

namespace zen::kernels {

// y[r * y_row_step + t * y_tok_step] = dot(weight row r, activation row t) for the tile's
// R rows x T tokens; weight rows are w_stride bytes apart, activation rows act_stride.
// Every kernel of a dtype gives each (r, t) exactly what vec_dot gives, bit for bit.
using DotTileFn = void (*)(const uint8_t* w, size_t w_stride, const uint8_t* act, size_t act_stride, int64_t k,
                           float* y, ptrdiff_t y_row_step, ptrdiff_t y_tok_step);

struct DotKernels {
  int tile_rows = 1;         // R of `rows`
  DotTileFn rows = nullptr;  // tile_rows rows x 1 token (decode)
  DotTileFn tokens[4] = {};  // tokens[T-1]: 1 row x T tokens (prefill)
  DotTileFn rows2_tokens4 = nullptr;  // 2 rows x 4 tokens (prefill: each activation load serves 2 rows)
};

// The dispatched kernels for a weight dtype (AVX2 or scalar); throws zen::Error if the dtype
// has no dot product.
DotKernels dot_kernels(DType weight);

}  // namespace zen::kernels
