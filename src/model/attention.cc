#include "model/attention.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

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

void store_kv(KvPool& kv, int layer, const ForwardBatch& batch, const FlatBatch& flat, const float* k,
              const float* v, int64_t kv_dim) {
  for (int64_t t = 0; t < flat.size(); ++t) {
    const SeqSlice& slice = batch.seqs[static_cast<size_t>(flat.seq[static_cast<size_t>(t)])];
    kv.store(layer, slice.blocks, flat.pos[static_cast<size_t>(t)], k + t * kv_dim, v + t * kv_dim);
  }
}

void paged_attention(const KvPool& kv, int layer, const ForwardBatch& batch, const FlatBatch& flat,
                     const AttentionShape& shape, const float* q, float* out, ThreadPool& pool,
                     std::vector<float>& scratch) {
  const int64_t hd = shape.head_dim, nh = shape.num_heads;
  const int64_t group = nh / shape.num_kv_heads, context = flat.max_context;
  const size_t need = static_cast<size_t>(pool.size()) * static_cast<size_t>(context);
  if (scratch.size() < need) scratch.resize(need);
  pool.parallel_for(flat.size() * nh, [&](int64_t begin, int64_t end, int thread) {
    float* scores = &scratch[static_cast<size_t>(thread) * static_cast<size_t>(context)];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / nh, h = item % nh, g = h / group;
      const SeqSlice& slice = batch.seqs[static_cast<size_t>(flat.seq[static_cast<size_t>(t)])];
      const int64_t len = flat.pos[static_cast<size_t>(t)] + 1;  // causal: itself and everything before
      const float* qh = q + (t * nh + h) * hd;
      float* oh = out + (t * nh + h) * hd;
      kv.key_scores(layer, slice.blocks, g, qh, shape.scale, len, scores);
      float max_score = -INFINITY;
      for (int64_t j = 0; j < len; ++j) max_score = std::max(max_score, scores[j]);
      float sum = 0.0f;
      for (int64_t j = 0; j < len; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        sum += scores[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < len; ++j) scores[j] *= inv;
      kv.weighted_values(layer, slice.blocks, g, scores, len, oh);
    }
  });
}

}  // namespace zen
