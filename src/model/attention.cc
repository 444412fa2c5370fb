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

// One work item is one token and one KV head: its K and V rows are read once for all the
// query heads of the group (GQA), a cache block at a time, with an online softmax (running
// max and sum per head, the accumulator rescaled once per block), so no score buffer spans
// the context and long contexts stream through the cache once per group instead of per head.
void paged_attention(const KvPool& kv, int layer, const ForwardBatch& batch, const FlatBatch& flat,
                     const AttentionShape& shape, const float* q, float* out, ThreadPool& pool,
                     std::vector<float>& scratch) {
  const int64_t hd = shape.head_dim, nh = shape.num_heads, nkv = shape.num_kv_heads;
  const int64_t group = nh / nkv, bs = kv.block_size();
  // Per thread: acc [group, hd], max [group], sum [group], p [group, bs], k and v rows [bs, hd].
  const int64_t per_thread = group * hd + 2 * group + group * bs + 2 * bs * hd;
  const size_t need = static_cast<size_t>(pool.size() * per_thread);
  if (scratch.size() < need) scratch.resize(need);
  pool.parallel_for(flat.size() * nkv, [&](int64_t begin, int64_t end, int thread) {
    float* acc = &scratch[static_cast<size_t>(thread * per_thread)];
    float* run_max = acc + group * hd;
    float* run_sum = run_max + group;
    float* p = run_sum + group;
    float* k_buf = p + group * bs;
    float* v_buf = k_buf + bs * hd;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / nkv, g = item % nkv;
      const SeqSlice& slice = batch.seqs[static_cast<size_t>(flat.seq[static_cast<size_t>(t)])];
      const int64_t len = flat.pos[static_cast<size_t>(t)] + 1;  // causal: itself and everything before
      const float* qg = q + (t * nh + g * group) * hd;           // [group, hd]
      std::fill(acc, acc + group * hd, 0.0f);
      std::fill(run_max, run_max + group, -INFINITY);
      std::fill(run_sum, run_sum + group, 0.0f);
      for (int64_t b0 = 0; b0 < len; b0 += bs) {
        const int32_t block = slice.blocks[static_cast<size_t>(b0 / bs)];
        const int64_t count = std::min(bs, len - b0);
        int64_t k_stride = 0, v_stride = 0;
        const float* k = kv.k_rows_f32(layer, block, 0, count, g, k_buf, &k_stride);
        for (int64_t h = 0; h < group; ++h) {
          float* ph = p + h * bs;
          float block_max = -INFINITY;
          for (int64_t j = 0; j < count; ++j) {
            ph[j] = kernels::dot_f32(qg + h * hd, k + j * k_stride, hd) * shape.scale;
            block_max = std::max(block_max, ph[j]);
          }
          const float new_max = std::max(run_max[h], block_max);
          if (new_max > run_max[h] && run_sum[h] > 0.0f) {
            const float correction = std::exp(run_max[h] - new_max);
            run_sum[h] *= correction;
            for (int64_t i = 0; i < hd; ++i) acc[h * hd + i] *= correction;
          }
          run_max[h] = new_max;
          for (int64_t j = 0; j < count; ++j) ph[j] -= new_max;
          kernels::exp_f32(ph, count, ph);
          for (int64_t j = 0; j < count; ++j) run_sum[h] += ph[j];
        }
        const float* v = kv.v_rows_f32(layer, block, 0, count, g, v_buf, &v_stride);
        for (int64_t h = 0; h < group; ++h)
          for (int64_t j = 0; j < count; ++j) kernels::axpy_f32(p[h * bs + j], v + j * v_stride, acc + h * hd, hd);
      }
      for (int64_t h = 0; h < group; ++h) {
        const float inv = 1.0f / run_sum[h];
        float* o = out + (t * nh + g * group + h) * hd;
        for (int64_t i = 0; i < hd; ++i) o[i] = acc[h * hd + i] * inv;
      }
    }
  });
}

}  // namespace zen
