#include "model/attention.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "kernels/cpu/ops.h"

namespace zen {

void FlatBatch::build(const ForwardBatch& batch, int64_t vocab_size, int64_t block_size) {
  ids.clear();
  seq.clear();
  pos.clear();
  logit_row.clear();
  max_context = 0;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SeqSlice& slice = batch.seqs[s];
    const auto n = static_cast<int64_t>(slice.tokens.size());
    if (n == 0) fail("forward: sequence ", s, " of the batch has no new tokens");
    if (slice.pos < 0) fail("forward: sequence ", s, " has negative position ", slice.pos);
    const int64_t end = slice.pos + n;
    if (static_cast<int64_t>(slice.blocks.size()) * block_size < end)
      fail("forward: sequence ", s, " needs ", end, " KV slots but its block table holds ",
           static_cast<int64_t>(slice.blocks.size()) * block_size);
    if (batch.window_kv != nullptr && static_cast<int64_t>(slice.window_blocks.size()) * block_size < end)
      fail("forward: sequence ", s, " needs ", end, " window KV slots but its window table holds ",
           static_cast<int64_t>(slice.window_blocks.size()) * block_size);
    if (!slice.state_history.empty() && static_cast<int64_t>(slice.state_history.size()) != n)
      fail("forward: sequence ", s, " has ", slice.state_history.size(), " state-history slots for ", n, " tokens");
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = slice.tokens[static_cast<size_t>(i)];
      if (id < 0 || id >= vocab_size) fail("token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
      if (slice.all_logits || i == n - 1) logit_row.push_back(static_cast<int64_t>(ids.size()));
      ids.push_back(id);
      seq.push_back(static_cast<int32_t>(s));
      pos.push_back(slice.pos + i);
    }
    max_context = std::max(max_context, end);
  }
}

LayerKv layer_kv(const ForwardBatch& batch, const ModelConfig& cfg, int64_t layer) {
  if (batch.window_kv == nullptr) return {batch.kv, cfg.kv_layer_index(layer), false};
  const bool windowed = cfg.is_window_layer(layer);
  return {windowed ? batch.window_kv : batch.kv, cfg.kv_group_index(layer), windowed};
}

void store_kv(const LayerKv& kv, const ForwardBatch& batch, const FlatBatch& flat, const float* k, const float* v,
              int64_t kv_dim) {
  for (int64_t t = 0; t < flat.size(); ++t) {
    const SeqSlice& slice = batch.seqs[static_cast<size_t>(flat.seq[static_cast<size_t>(t)])];
    kv.pool->store(kv.index, kv.windowed ? slice.window_blocks : slice.blocks, flat.pos[static_cast<size_t>(t)],
                   k + t * kv_dim, v + t * kv_dim);
  }
}

namespace {

constexpr int64_t kQueryTile = 8;  // query tokens of one sequence sharing each K/V block fetch

// Consecutive flat tokens of one sequence, at most kQueryTile: [begin, end).
struct QueryTile {
  int64_t begin, end;
};

std::vector<QueryTile> query_tiles(const FlatBatch& flat) {
  std::vector<QueryTile> tiles;
  for (int64_t t = 0; t < flat.size();) {
    int64_t e = t + 1;
    while (e < flat.size() && e - t < kQueryTile && flat.seq[static_cast<size_t>(e)] == flat.seq[static_cast<size_t>(t)]) ++e;
    tiles.push_back({t, e});
    t = e;
  }
  return tiles;
}

// Work item i -> (KV head, tile). Items are handed out one at a time as threads come free.
// Within a head the tiles go first, last, second, second last, ... so long causal spans
// alternate with short ones and no thread is left with a long one at the end.
void item_to_head_tile(int64_t item, int64_t n_tiles, int64_t* head, int64_t* tile) {
  *head = item / n_tiles;
  const int64_t k = item % n_tiles;
  *tile = k % 2 == 0 ? k / 2 : n_tiles - 1 - k / 2;
}

// One row's scores of a block, p [count], into its online softmax: the running maximum rises
// to cover them (the accumulator acc [hd] and the running sum rescaled when it does) and p is
// shifted by it. The exp and the sum follow for all the tile's rows at once.
void raise_max(float* p, int64_t count, float* run_max, float* run_sum, float* acc, int64_t hd) {
  const float new_max = std::max(*run_max, *std::max_element(p, p + count));
  if (new_max > *run_max && *run_sum > 0.0f) {
    const float correction = std::exp(*run_max - new_max);
    *run_sum *= correction;
    for (int64_t c = 0; c < hd; ++c) acc[c] *= correction;
  }
  *run_max = new_max;
  for (int64_t j = 0; j < count; ++j) p[j] -= new_max;
}

}  // namespace

// One work item is one KV head and a tile of up to kQueryTile consecutive tokens of one
// sequence: each cache block's K and V rows are fetched once for all the tile's tokens and all
// the query heads of the group (GQA), the scores of all those (token, head) rows come from one
// tiled kernel, and each row keeps an online softmax (running max and sum, the accumulator
// rescaled when the max rises). Every (token, head) goes through exactly the operations it
// would alone (the tile only shares fetches and kernel calls), so results do not depend on the
// batch, the tiling or the thread count.
void paged_attention(const LayerKv& layer_kv, const ForwardBatch& batch, const FlatBatch& flat, const AttentionShape& shape,
                     const float* q, float* out, ThreadPool& pool, std::vector<float>& scratch) {
  const KvPool& kv = *layer_kv.pool;
  const int layer = layer_kv.index;
  const int64_t hd = shape.head_dim, nh = shape.num_heads, nkv = shape.num_kv_heads;
  const int64_t group = nh / nkv, bs = kv.block_size();
  const int64_t rows = kQueryTile * group;  // (token, head) pairs of a tile
  // Per thread: acc [rows, hd], max [rows], sum [rows], p [rows, bs], k and v rows [bs, hd].
  const int64_t per_thread = rows * hd + 2 * rows + rows * bs + 2 * bs * hd;
  const size_t need = static_cast<size_t>(pool.size() * per_thread);
  if (scratch.size() < need) scratch.resize(need);
  const std::vector<QueryTile> tiles = query_tiles(flat);
  const auto n_tiles = static_cast<int64_t>(tiles.size());
  std::vector<std::vector<const float*>> q_rows_of(static_cast<size_t>(pool.size()),
                                                   std::vector<const float*>(static_cast<size_t>(rows)));
  pool.parallel_chunks(n_tiles * nkv, [&](int64_t begin, int64_t end, int thread) {
    float* acc = &scratch[static_cast<size_t>(thread * per_thread)];
    float* run_max = acc + rows * hd;
    float* run_sum = run_max + rows;
    float* p = run_sum + rows;
    float* k_buf = p + rows * bs;
    float* v_buf = k_buf + bs * hd;
    std::vector<const float*>& q_rows = q_rows_of[static_cast<size_t>(thread)];  // [rows]: row i * group + h
    for (int64_t item = begin; item < end; ++item) {
      int64_t g, tile;
      item_to_head_tile(item, n_tiles, &g, &tile);
      const QueryTile qt = tiles[static_cast<size_t>(tile)];
      const SeqSlice& slice = batch.seqs[static_cast<size_t>(flat.seq[static_cast<size_t>(qt.begin)])];
      const int64_t n_tokens = qt.end - qt.begin, n_rows = n_tokens * group;
      for (int64_t row = 0; row < n_rows; ++row)
        q_rows[static_cast<size_t>(row)] = q + ((qt.begin + row / group) * nh + g * group + row % group) * hd;
      std::fill(acc, acc + n_rows * hd, 0.0f);
      std::fill(run_max, run_max + n_rows, -INFINITY);
      std::fill(run_sum, run_sum + n_rows, 0.0f);
      // Keys of the tile's token i: [first(i), span(i)): itself and everything before, or the
      // last `window` positions of a sliding layer.
      auto span = [&](int64_t i) { return flat.pos[static_cast<size_t>(qt.begin + i)] + 1; };
      auto first = [&](int64_t i) { return shape.window > 0 ? std::max<int64_t>(0, span(i) - shape.window) : 0; };
      int64_t longest = 0, earliest = INT64_MAX;
      for (int64_t i = 0; i < n_tokens; ++i) {
        longest = std::max(longest, span(i));
        earliest = std::min(earliest, first(i));
      }
      for (int64_t b0 = earliest / bs * bs; b0 < longest; b0 += bs) {
        const int32_t block = (layer_kv.windowed ? slice.window_blocks : slice.blocks)[static_cast<size_t>(b0 / bs)];
        const int64_t fetched = std::min(bs, longest - b0);
        int64_t k_stride = 0, v_stride = 0;
        const float* k = kv.k_rows_f32(layer, block, 0, fetched, g, k_buf, &k_stride);
        const float* v = kv.v_rows_f32(layer, block, 0, fetched, g, v_buf, &v_stride);
        // p [n_rows, bs]: every row's scores against every fetched key; each row then uses the
        // keys it sees, [skip, skip + count).
        kernels::dot_tile_f32(q_rows.data(), n_rows, k, k_stride, fetched, hd, shape.scale, p, bs);
        auto visible = [&](int64_t i, int64_t* skip, int64_t* count) {
          *skip = std::max<int64_t>(0, first(i) - b0);  // rows before the window
          *count = std::min(bs, span(i) - b0) - *skip;
          return *count > 0;  // else this block lies past the token, or before its window
        };
        for (int64_t i = 0; i < n_tokens; ++i) {
          int64_t skip, count;
          if (!visible(i, &skip, &count)) continue;
          for (int64_t row = i * group; row < (i + 1) * group; ++row)
            raise_max(p + row * bs + skip, count, &run_max[row], &run_sum[row], acc + row * hd, hd);
        }
        kernels::exp_f32(p, n_rows * bs, p);  // rows' unused entries too: cheaper than a call per row
        bool whole = true;  // every token sees every fetched key
        for (int64_t i = 0; i < n_tokens; ++i) {
          int64_t skip, count;
          if (!visible(i, &skip, &count)) {
            whole = false;
            continue;
          }
          whole = whole && skip == 0 && count == fetched;
          for (int64_t row = i * group; row < (i + 1) * group; ++row)
            for (int64_t j = skip; j < skip + count; ++j) run_sum[row] += p[row * bs + j];
        }
        // The rows that see the same keys share one pass over the V rows: all the tile's rows
        // away from the diagonal and the window's edge, else the group's heads of each token.
        if (whole) {
          kernels::axpy_rows_f32(p, bs, v, v_stride, fetched, hd, acc, hd, n_rows);
        } else {
          for (int64_t i = 0; i < n_tokens; ++i) {
            int64_t skip, count;
            if (!visible(i, &skip, &count)) continue;
            kernels::axpy_rows_f32(p + i * group * bs + skip, bs, v + skip * v_stride, v_stride, count, hd,
                                   acc + i * group * hd, hd, group);
          }
        }
      }
      for (int64_t row = 0; row < n_rows; ++row) {
        const float inv = 1.0f / run_sum[row];
        float* o = out + ((qt.begin + row / group) * nh + g * group + row % group) * hd;
        for (int64_t c = 0; c < hd; ++c) o[c] = acc[row * hd + c] * inv;
      }
    }
  }, 1);
}

}  // namespace zen
