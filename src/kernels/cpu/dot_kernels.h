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

// Rewrites `rows` weight rows (w_stride bytes apart, k elements each) into rows of another
// dtype, packed one after another in `out`.
using RowConvertFn = void (*)(const uint8_t* w, size_t w_stride, int64_t rows, int64_t k, uint8_t* out);

struct DotKernels {
  int tile_rows = 1;         // R of `rows`
  DotTileFn rows = nullptr;  // tile_rows rows x 1 token (decode)
  DotTileFn tokens[4] = {};  // tokens[T-1]: 1 row x T tokens (prefill)
  // Prefill block: block_rows x block_tokens (each activation load serves several rows, each
  // weight unpack several tokens); nullptr if the dtype has none.
  int block_rows = 0, block_tokens = 0;
  DotTileFn block = nullptr;
  // Prefill may first rewrite a tile of weight rows into `panel_dtype` (exactly: the same
  // integer quants and scales) and run that dtype's kernels on it, whose arithmetic per
  // (row, token) is this dtype's: cheaper to unpack once per row tile than once per token
  // group. nullptr: prefill reads the weights as stored.
  RowConvertFn to_panel = nullptr;
  DType panel_dtype = DType::F32;
};

// The dispatched kernels for a weight dtype (AVX2 or scalar); throws zen::Error if the dtype
// has no dot product.
DotKernels dot_kernels(DType weight);

}  // namespace zen::kernels
