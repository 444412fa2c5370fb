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

// Rewrites `rows` weight rows (w_stride bytes apart, k elements each) into panel rows, packed
// one after another in `out`.
using RowConvertFn = void (*)(const uint8_t* w, size_t w_stride, int64_t rows, int64_t k, uint8_t* out);
// Rewrites one activation row (as quantize_activation made it) into the panel kernels' layout.
using ActConvertFn = void (*)(const uint8_t* act, int64_t k, uint8_t* out);
using RowBytesFn = size_t (*)(int64_t k);

// Prefill kernels over one weight and activation layout.
struct PrefillTiles {
  DotTileFn tokens[4] = {};  // tokens[T-1]: 1 row x T tokens
  // block_rows x block_tokens (each activation load serves several rows, each weight unpack
  // several tokens); nullptr if none.
  int block_rows = 0, block_tokens = 0;
  DotTileFn block = nullptr;
};

struct DotKernels {
  int tile_rows = 1;         // R of `rows`
  DotTileFn rows = nullptr;  // tile_rows rows x 1 token (decode)
  PrefillTiles prefill;      // on the stored weight rows and quantize_activation's rows
  // Optional panel path for prefill: rewrite a tile of weight rows (and the activation rows)
  // into a layout that is cheaper to dot, exactly (the same integers and scales), and run
  // `panel` tiles on it, whose arithmetic per (row, token) is that of `rows`: results stay
  // bit-identical with decode. nullptr: prefill reads the weights as stored.
  RowConvertFn to_panel = nullptr;
  RowBytesFn panel_row_bytes = nullptr;
  ActConvertFn act_to_panel = nullptr;
  RowBytesFn panel_act_row_bytes = nullptr;
  PrefillTiles panel;
};

// The dispatched kernels for a weight dtype (AVX2 or scalar); throws zen::Error if the dtype
// has no dot product.
DotKernels dot_kernels(DType weight);

}  // namespace zen::kernels
