// Driver and register-blocked panel tiles for fp_gemm.h.
#include "kernels/cpu/fp_gemm.h"

#include <algorithm>
#include <vector>

namespace zen::kernels {

#if ZEN_HAVE_X86_SIMD
namespace {

constexpr int kTileRows = 4;      // accumulators: 4 rows x 3 tokens = 12 of the 16 ymm registers
constexpr int kTileTokens = 3;
constexpr int64_t kPanelRows = 32;  // rows dequantized per panel: [32, cols] f32 stays in L2
constexpr size_t kMinParallelBytes = size_t{64} << 10;  // below this, waking the pool costs more

// Where a tile's segment scales are: scales[r * n_seg + s] for its rows r (nullptr: none).
struct TileScales {
  const float* scales = nullptr;
  int64_t n_seg = 0, segment = 0;
};

// y[t * y_stride + r] = dot(w[r], x[t]) for R rows and NT tokens, in the fp_gemm.h order.
// w: [R, kp] panel (zero-padded), x: [NT, cols] rows `x_stride` apart.
template <int R, int NT>
ZEN_TARGET_AVX2 void panel_tile(const float* w, int64_t kp, const float* x, int64_t x_stride, int64_t cols, float* y,
                                int64_t y_stride, const TileScales& ts) {
  alignas(32) float total[R][NT][8] = {};  // segmented: the running fma(acc, scale, total), in memory
  __m256 acc[R][NT];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  const int64_t segment = ts.scales != nullptr ? ts.segment : cols;
  for (int64_t k0 = 0, seg = 0; k0 < cols; k0 += segment, ++seg) {
    const int64_t k1 = std::min(cols, k0 + segment);
    if (k0 > 0)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
    int64_t i = k0;
    for (; i + 8 <= k1; i += 8) {
      __m256 xv[NT];
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(x + t * x_stride + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 wv = _mm256_loadu_ps(w + r * kp + i);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
    if (i < k1) {  // the row's last, partial chunk
      const __m256i mask = tail_mask(k1 - i);
      __m256 xv[NT];
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) xv[t] = _mm256_maskload_ps(x + t * x_stride + i, mask);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 wv = _mm256_loadu_ps(w + r * kp + i);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
    if (ts.scales == nullptr) break;  // unscaled: one chain over the whole row
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_broadcast_ss(ts.scales + r * ts.n_seg + seg);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m256 before = seg == 0 ? _mm256_setzero_ps() : _mm256_load_ps(total[r][t]);
        _mm256_store_ps(total[r][t], _mm256_fmadd_ps(acc[r][t], s, before));
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      y[t * y_stride + r] = hsum(ts.scales != nullptr ? _mm256_load_ps(total[r][t]) : acc[r][t]);
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t, const TileScales&);

template <int NT>
TileFn tile_for_rows(int64_t rows) {
  switch (rows) {
    case 1: return panel_tile<1, NT>;
    case 2: return panel_tile<2, NT>;
    case 3: return panel_tile<3, NT>;
    default: return panel_tile<4, NT>;
  }
}

TileFn tile_for(int64_t rows, int64_t tokens) {
  switch (tokens) {
    case 1: return tile_for_rows<1>(rows);
    case 2: return tile_for_rows<2>(rows);
    default: return tile_for_rows<3>(rows);
  }
}

// Panel rows [n, kp] times every token: token triples outer (their x stays in L1 while the
// panel's rows pass under them).
void panel_times_tokens(const float* panel, int64_t n, int64_t kp, const float* x, int64_t n_tokens, int64_t cols,
                        float* y, int64_t rows, const TileScales& scales) {
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
    const int64_t nt = std::min<int64_t>(kTileTokens, n_tokens - t0);
    for (int64_t r0 = 0; r0 < n; r0 += kTileRows) {
      const int64_t nr = std::min<int64_t>(kTileRows, n - r0);
      TileScales ts = scales;
      if (ts.scales != nullptr) ts.scales += r0 * ts.n_seg;
      tile_for(nr, nt)(panel + r0 * kp, kp, x + t0 * cols, cols, cols, y + t0 * rows + r0, rows, ts);
    }
  }
}

}  // namespace

void fp_gemm_avx2(const FpGemmFormat& f, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  if (n_tokens <= 0 || f.rows <= 0) return;
  const bool serial = f.weight_bytes * static_cast<size_t>(n_tokens) < kMinParallelBytes;
  if (n_tokens == 1) {
    auto run = [&](int64_t r0, int64_t r1) { f.gemv(f.ctx, r0, r1, x, y); };
    if (serial) return run(0, f.rows);
    pool.parallel_for(f.rows, [&run](int64_t r0, int64_t r1, int) { run(r0, r1); }, 8);
    return;
  }
  const int64_t kp = padded_cols(f.cols);
  const int64_t n_seg = f.segment_scales != nullptr ? (f.cols + f.segment - 1) / f.segment : 0;
  auto run = [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> panel;  // [kPanelRows, kp]
    thread_local std::vector<float> scales;  // [kPanelRows, n_seg]
    panel.resize(static_cast<size_t>(kPanelRows * kp));
    scales.resize(static_cast<size_t>(kPanelRows * n_seg));
    for (int64_t rb = r0; rb < r1; rb += kPanelRows) {
      const int64_t n = std::min(kPanelRows, r1 - rb);
      f.decode_panel(f.ctx, rb, n, panel.data());
      TileScales ts;
      if (n_seg > 0) {
        for (int64_t i = 0; i < n; ++i) f.segment_scales(f.ctx, rb + i, scales.data() + i * n_seg);
        ts = TileScales{scales.data(), n_seg, f.segment};
      }
      panel_times_tokens(panel.data(), n, kp, x, n_tokens, f.cols, y + rb, f.rows, ts);
    }
  };
  if (serial) return run(0, f.rows);
  pool.parallel_for(f.rows, [&run](int64_t r0, int64_t r1, int) { run(r0, r1); }, 16);
}
#endif

}  // namespace zen::kernels
