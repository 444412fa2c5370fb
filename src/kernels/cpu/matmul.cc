// matmul: quantize the activation rows once, then split the output rows over the pool.
// Decode (T = 1) streams each weight row once (dot kernels of 1-4 rows, prefetching ahead).
// Prefill (T > 1) walks the weight in tiles of kRowTile rows and, for each tile, passes every
// token of a token tile over it, in block tiles of several rows x tokens (each weight block
// unpacked once for the tokens, each activation block loaded once for the rows), so the tile
// stays in L1/L2 while the tokens reuse it: compute-bound instead of bandwidth-bound. Formats
// that are costly to unpack (Q4_0, Q5_0) are first rewritten, a row tile at a time, into Q8_0
// blocks holding the same integers and scales. Every output element comes from one kernel whose arithmetic for that
// (row, token) does not depend on the tile it sits in: results are batch-invariant.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/simd.h"

namespace zen::kernels {
namespace {

constexpr int64_t kRowTile = 16;    // weight rows kept hot while tokens pass over them
constexpr int64_t kTokenTile = 64;  // tokens per pass; bounds the activation working set
// Below this much weight traffic (bytes x tokens) waking the pool costs more than it saves.
constexpr size_t kMinParallelBytes = size_t{64} << 10;

// Per-thread scratch for quantized activations; grows, never shrinks.
uint8_t* activation_scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

struct Problem {
  const uint8_t* w;
  size_t w_row_bytes;
  const uint8_t* act;
  size_t act_row_bytes;
  int64_t n_rows, k, n_tokens;
  float* y;
  DotKernels kernels;
  DotKernels panel_kernels;  // of kernels.panel_dtype, when kernels.to_panel is set
};

// Decode: tile_rows weight rows per call against the one activation row.
void gemv_rows(const Problem& p, int64_t r0, int64_t r1) {
  const int64_t step = p.kernels.tile_rows;
  int64_t r = r0;
  for (; r + step <= r1; r += step)
    p.kernels.rows(p.w + static_cast<size_t>(r) * p.w_row_bytes, p.w_row_bytes, p.act, 0, p.k, p.y + r, 1, 0);
  for (; r < r1; ++r)
    p.kernels.tokens[0](p.w + static_cast<size_t>(r) * p.w_row_bytes, p.w_row_bytes, p.act, 0, p.k, p.y + r, 1, 0);
}

// Tokens [t, t1) of one weight row, up to 4 per kernel call.
void row_tokens(const DotKernels& kern, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t k,
                int64_t t, int64_t t1, float* y, ptrdiff_t n) {
  for (; t < t1; t += 4) {
    const auto nt = static_cast<int>(std::min<int64_t>(4, t1 - t));
    kern.tokens[nt - 1](w, ws, a + static_cast<size_t>(t) * as, as, k, y + t * n, 1, n);
  }
}

// Prefill of rows [r0, r1) against tokens [t0, t1), the weights as `w` holds them (stored rows
// or a panel): block tiles where they fit, single-row kernels for what is left.
void gemm_tile(const DotKernels& kern, const uint8_t* w, size_t ws, const Problem& p, int64_t r0, int64_t r1,
               int64_t t0, int64_t t1) {
  const auto n = static_cast<ptrdiff_t>(p.n_rows);
  const int64_t br = kern.block_rows, bt = kern.block_tokens;
  int64_t t = t0;
  if (kern.block != nullptr) {
    for (; t + bt <= t1; t += bt) {
      const uint8_t* a = p.act + static_cast<size_t>(t) * p.act_row_bytes;
      int64_t r = r0;
      for (; r + br <= r1; r += br)
        kern.block(w + static_cast<size_t>(r - r0) * ws, ws, a, p.act_row_bytes, p.k, p.y + t * n + r, 1, n);
      for (; r < r1; ++r)
        row_tokens(kern, w + static_cast<size_t>(r - r0) * ws, ws, p.act, p.act_row_bytes, p.k, t, t + bt, p.y + r, n);
    }
  }
  for (int64_t r = r0; r < r1; ++r)
    row_tokens(kern, w + static_cast<size_t>(r - r0) * ws, ws, p.act, p.act_row_bytes, p.k, t, t1, p.y + r, n);
}

// Prefill: row tiles x token tiles. Formats with a panel dtype unpack each row tile once per
// token tile into per-thread scratch and run the panel dtype's kernels over it.
void gemm_rows(const Problem& p, int64_t r0, int64_t r1) {
  const bool panel = p.kernels.to_panel != nullptr;
  const size_t panel_row_bytes = panel ? dtype_row_bytes(p.kernels.panel_dtype, p.k) : 0;
  thread_local std::vector<uint8_t> panel_buffer;
  if (panel && panel_buffer.size() < panel_row_bytes * kRowTile) panel_buffer.resize(panel_row_bytes * kRowTile);
  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kTokenTile) {
    const int64_t t1 = std::min(p.n_tokens, t0 + kTokenTile);
    for (int64_t rb = r0; rb < r1; rb += kRowTile) {
      const int64_t re = std::min(r1, rb + kRowTile);
      const uint8_t* w = p.w + static_cast<size_t>(rb) * p.w_row_bytes;
      if (!panel) {
        gemm_tile(p.kernels, w, p.w_row_bytes, p, rb, re, t0, t1);
      } else {
        p.kernels.to_panel(w, p.w_row_bytes, re - rb, p.k, panel_buffer.data());
        gemm_tile(p.panel_kernels, panel_buffer.data(), panel_row_bytes, p, rb, re, t0, t1);
      }
    }
  }
}

}  // namespace

void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  if (n_tokens <= 0) return;
  const int64_t n_rows = w.rows(), k = w.cols();
  const size_t w_row_bytes = dtype_row_bytes(w.dtype, k);
  if (w.data == nullptr || w.nbytes < static_cast<size_t>(n_rows) * w_row_bytes)
    fail("matmul: tensor '", w.name, "' ", w.shape_str(), " ", dtype_name(w.dtype), " holds ", w.nbytes,
         " bytes, fewer than its shape needs");

  // BF16 widens exactly to f32: the panel GEMM of fp_gemm.h beats per-row tiles.
  if (w.dtype == DType::BF16 && use_avx2()) return bf16_matmul_avx2(w, x, n_tokens, y, pool);

  Problem p{};
  p.w = w.data;
  p.w_row_bytes = w_row_bytes;
  p.n_rows = n_rows;
  p.k = k;
  p.n_tokens = n_tokens;
  p.y = y;
  p.kernels = dot_kernels(w.dtype);
  if (p.kernels.to_panel != nullptr) p.panel_kernels = dot_kernels(p.kernels.panel_dtype);
  if (activation_format(w.dtype) == ActivationFormat::F32) {
    p.act = reinterpret_cast<const uint8_t*>(x);
    p.act_row_bytes = static_cast<size_t>(k) * sizeof(float);
  } else {
    p.act_row_bytes = activation_row_bytes(w.dtype, k);
    uint8_t* scratch = activation_scratch(p.act_row_bytes * static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t)
      quantize_activation(w.dtype, x + t * k, scratch + static_cast<size_t>(t) * p.act_row_bytes, k);
    p.act = scratch;
  }

  const bool inline_only = static_cast<size_t>(n_rows) * w_row_bytes * static_cast<size_t>(n_tokens) < kMinParallelBytes;
  if (n_tokens == 1) {
    if (inline_only) return gemv_rows(p, 0, n_rows);
    pool.parallel_for(n_rows, [&p](int64_t r0, int64_t r1, int) { gemv_rows(p, r0, r1); }, p.kernels.tile_rows);
  } else {
    if (inline_only) return gemm_rows(p, 0, n_rows);
    pool.parallel_for(n_rows, [&p](int64_t r0, int64_t r1, int) { gemm_rows(p, r0, r1); }, kRowTile);
  }
}

}  // namespace zen::kernels
