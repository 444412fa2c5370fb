// Pieces every architecture's forward shares: the flattened view of a ForwardBatch and causal
// attention over the paged KV cache.
#pragma once
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace zen {

// A ForwardBatch laid out token by token, as the activations are: row t of every activation
// matrix belongs to sequence seq[t] at position pos[t].
struct FlatBatch {
  std::vector<int32_t> ids;        // [n] token ids (validated against the vocabulary)
  std::vector<int32_t> seq;        // [n] index into batch.seqs
  std::vector<int64_t> pos;        // [n] absolute positions
  std::vector<int64_t> logit_row;  // [logit_rows] token rows whose logits are returned
  int64_t max_context = 0;         // longest attention span (pos + 1) of any token
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  // Throws zen::Error on an empty slice, a bad token id, or a block table too short.
  void build(const ForwardBatch& batch, int64_t vocab_size, int64_t block_size);
};

struct AttentionShape {
  int64_t num_heads, num_kv_heads, head_dim;
  float scale;  // usually 1 / sqrt(head_dim)
  int64_t window = 0;  // sliding window: a query at p attends to keys p - window < k <= p; 0: all
};

// Where one layer's K/V live: the batch's window pool (a sliding layer, when the engine keeps
// them apart; tables SeqSlice::window_blocks) or its main pool (SeqSlice::blocks), and the
// layer's index there.
struct LayerKv {
  KvPool* pool;
  int index;
  bool windowed;
};
LayerKv layer_kv(const ForwardBatch& batch, const ModelConfig& cfg, int64_t layer);

// Writes the new tokens' K and V rows (k, v: [n, kv_heads * head_dim]) into the pool.
void store_kv(const LayerKv& kv, const ForwardBatch& batch, const FlatBatch& flat, const float* k, const float* v,
              int64_t kv_dim);

// Causal GQA attention of every batch token over its own sequence's cache (which already
// holds the new tokens): out[t, h] = softmax(scale * q[t, h] . K[lo..pos[t]]) V (lo = 0, or
// pos[t] - window + 1 for a sliding layer), with an online
// softmax a cache block at a time. One (token, KV head) pair per work item, computed in a
// fixed order: batch-invariant. q, out: [n, num_heads * head_dim]; scratch: per-thread space.
void paged_attention(const LayerKv& kv, const ForwardBatch& batch, const FlatBatch& flat, const AttentionShape& shape,
                     const float* q, float* out, ThreadPool& pool, std::vector<float>& scratch);

}  // namespace zen
