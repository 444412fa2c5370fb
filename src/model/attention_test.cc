// Paged attention against a plain double-precision softmax reference: random data, odd head
// counts and context lengths, scattered block tables, every KV precision, GQA groups.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace zen {
namespace {

struct Case {
  int64_t heads, kv_heads, head_dim, context, new_tokens;
  KvDType dtype;
  int64_t window = 0;  // sliding window (0: full causal)
};

class PagedAttention : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttention, MatchesTheTwoPassReference) {
  const Case c = GetParam();
  ModelConfig cfg;
  cfg.num_layers = 2;
  cfg.num_heads = c.heads;
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  const int64_t bs = 16, blocks_needed = (c.context + bs - 1) / bs;
  KvPool kv(cfg, blocks_needed + 5, c.dtype, bs);
  // A scattered block table: physical blocks in reverse order with gaps.
  std::vector<int32_t> table;
  for (int64_t i = 0; i < blocks_needed; ++i) table.push_back(static_cast<int32_t>(blocks_needed + 4 - i));
  std::mt19937 rng(static_cast<uint32_t>(c.context * 31 + c.heads));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t kv_dim = c.kv_heads * c.head_dim, q_dim = c.heads * c.head_dim;
  std::vector<float> keys(static_cast<size_t>(c.context * kv_dim)), values(keys.size());
  for (auto& x : keys) x = 2.0f * normal(rng);  // wide score range: exercises the running max
  for (auto& x : values) x = normal(rng);
  for (int64_t p = 0; p < c.context; ++p) kv.store(1, table, p, &keys[p * kv_dim], &values[p * kv_dim]);
  // What the cache really holds (rounded to its precision) is what the reference attends to.
  std::vector<float> k_held(keys.size()), v_held(keys.size());
  for (int64_t p = 0; p < c.context; ++p)
    for (int64_t g = 0; g < c.kv_heads; ++g)
      for (int64_t i = 0; i < c.head_dim; ++i) {
        std::vector<float> unit(static_cast<size_t>(c.head_dim), 0.0f);
        unit[static_cast<size_t>(i)] = 1.0f;
        k_held[static_cast<size_t>(p * kv_dim + g * c.head_dim + i)] = kv.dot_k(1, table, p, g, unit.data());
        std::vector<float> out(static_cast<size_t>(c.head_dim), 0.0f);
        kv.axpy_v(1, table, p, g, 1.0f, out.data());
        v_held[static_cast<size_t>(p * kv_dim + g * c.head_dim + i)] = out[static_cast<size_t>(i)];
      }

  std::vector<int32_t> tokens(static_cast<size_t>(c.new_tokens), 1);
  SeqSlice slice;
  slice.tokens = tokens;
  slice.pos = c.context - c.new_tokens;
  slice.blocks = table;
  ForwardBatch batch;
  batch.kv = &kv;
  batch.seqs = std::span<const SeqSlice>(&slice, 1);
  FlatBatch flat;
  flat.build(batch, 10, bs);
  std::vector<float> q(static_cast<size_t>(c.new_tokens * q_dim)), out(q.size());
  for (auto& x : q) x = normal(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ThreadPool pool(2);
  std::vector<float> scratch;
  const AttentionShape shape{c.heads, c.kv_heads, c.head_dim, scale, c.window};
  paged_attention({&kv, 1, false}, batch, flat, shape, q.data(), out.data(), pool, scratch);
  for (int threads : {1, 3}) {  // items go to whichever thread is free: the same bits
    ThreadPool other(threads);
    std::vector<float> again(out.size()), other_scratch;
    paged_attention({&kv, 1, false}, batch, flat, shape, q.data(), again.data(), other, other_scratch);
    EXPECT_EQ(again, out) << threads << " threads";
  }
  if (c.window > 0) {
    // The same through a window table (ForwardBatch::window_kv), which holds no block before
    // the first new token's window: nothing there is read, and the result is the same.
    std::vector<int32_t> window_table = table;
    const int64_t first_block = std::max<int64_t>(0, slice.pos - c.window + 1) / bs;
    std::fill(window_table.begin(), window_table.begin() + first_block, -1);
    SeqSlice windowed = slice;
    windowed.window_blocks = window_table;
    ForwardBatch wb = batch;
    wb.window_kv = &kv;
    wb.seqs = std::span<const SeqSlice>(&windowed, 1);
    std::vector<float> out_w(out.size());
    paged_attention({&kv, 1, true}, wb, flat, shape, q.data(), out_w.data(), pool, scratch);
    EXPECT_EQ(out_w, out);
  }

  const int64_t group = c.heads / c.kv_heads;
  double worst = 0;
  for (int64_t t = 0; t < c.new_tokens; ++t)
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t len = slice.pos + t + 1, g = h / group;
      const int64_t from = c.window > 0 ? std::max<int64_t>(0, len - c.window) : 0;
      std::vector<double> s(static_cast<size_t>(len), -INFINITY);
      double m = -INFINITY;
      for (int64_t j = from; j < len; ++j) {
        double d = 0;
        for (int64_t i = 0; i < c.head_dim; ++i)
          d += static_cast<double>(q[static_cast<size_t>((t * c.heads + h) * c.head_dim + i)]) *
               k_held[static_cast<size_t>(j * kv_dim + g * c.head_dim + i)];
        s[static_cast<size_t>(j)] = d * scale;
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      double z = 0;
      for (auto& x : s) z += (x = std::exp(x - m));  // exp(-inf) = 0 outside the window
      for (int64_t i = 0; i < c.head_dim; ++i) {
        double want = 0;
        for (int64_t j = 0; j < len; ++j)
          want += s[static_cast<size_t>(j)] / z * v_held[static_cast<size_t>(j * kv_dim + g * c.head_dim + i)];
        const double got = out[static_cast<size_t>((t * c.heads + h) * c.head_dim + i)];
        worst = std::max(worst, std::abs(got - want));
      }
    }
  EXPECT_LT(worst, 2e-5) << "context " << c.context;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttention,
    ::testing::Values(Case{4, 2, 16, 1, 1, KvDType::F32}, Case{4, 2, 16, 17, 3, KvDType::F32},
                      Case{14, 2, 64, 700, 2, KvDType::F32}, Case{6, 6, 24, 33, 33, KvDType::F32},
                      Case{8, 1, 128, 129, 1, KvDType::F32}, Case{4, 2, 16, 50, 2, KvDType::BF16},
                      Case{4, 2, 16, 50, 2, KvDType::F8_E4M3}, Case{4, 2, 16, 50, 2, KvDType::F8_E5M2},
                      Case{14, 2, 64, 2048, 1, KvDType::F32},
                      // Sliding windows: inside one block, across blocks, one position, wider
                      // than the context, with a quantized cache.
                      Case{4, 2, 16, 50, 20, KvDType::F32, 5}, Case{4, 2, 16, 90, 33, KvDType::F32, 24},
                      Case{6, 2, 24, 40, 40, KvDType::F32, 1}, Case{4, 2, 16, 30, 30, KvDType::F32, 64},
                      Case{14, 2, 64, 700, 3, KvDType::BF16, 100}));

}  // namespace
}  // namespace zen
