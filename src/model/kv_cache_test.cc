#include "model/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"

namespace zen {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 3;
  c.head_dim = 10;
  return c;
}

// Reading back through dot_k / axpy_v equals f32 math on the stored (rounded) values, and the
// rounding error is within the format's relative precision.
TEST(KvCache, EveryPrecisionRoundTripsWithinItsUlp) {
  const ModelConfig cfg = small_config();
  const int64_t row = cfg.num_kv_heads * cfg.head_dim;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 2.0f);
  struct Case { KvDType t; float rel; float abs; };  // abs: half the subnormal step
  for (const Case c : {Case{KvDType::F32, 0.0f, 0.0f}, Case{KvDType::BF16, 1.0f / 256, 0.0f},
                       Case{KvDType::F8_E4M3, 1.0f / 16, 0x1p-10f}, Case{KvDType::F8_E5M2, 1.0f / 8, 0x1p-17f}}) {
    KvCache cache(cfg, 5, c.t);
    std::vector<float> k(static_cast<size_t>(row)), v(k.size()), q(static_cast<size_t>(cfg.head_dim));
    for (auto& x : k) x = d(rng);
    for (auto& x : v) x = d(rng);
    for (auto& x : q) x = d(rng);
    cache.store(1, 4, k.data(), v.data());
    for (int64_t h = 0; h < cfg.num_kv_heads; ++h) {
      float exact = 0, bound = 0;
      for (int64_t i = 0; i < cfg.head_dim; ++i) {
        exact += q[static_cast<size_t>(i)] * k[static_cast<size_t>(h * cfg.head_dim + i)];
        bound += std::fabs(q[static_cast<size_t>(i)] * k[static_cast<size_t>(h * cfg.head_dim + i)]) * c.rel +
                 std::fabs(q[static_cast<size_t>(i)]) * c.abs;
      }
      EXPECT_NEAR(cache.dot_k(1, 4, h, q.data()), exact, bound + 1e-4f) << kv_dtype_name(c.t);
      std::vector<float> out(static_cast<size_t>(cfg.head_dim), 1.0f);
      cache.axpy_v(1, 4, h, 0.5f, out.data());
      for (int64_t i = 0; i < cfg.head_dim; ++i) {
        const float want = 1.0f + 0.5f * v[static_cast<size_t>(h * cfg.head_dim + i)];
        EXPECT_NEAR(out[static_cast<size_t>(i)], want, std::fabs(0.5f * v[static_cast<size_t>(h * cfg.head_dim + i)]) * c.rel + 0.5f * c.abs + 1e-6f);
      }
    }
    EXPECT_EQ(cache.bytes_per_token(), static_cast<size_t>(2 * cfg.num_layers * row) * kv_dtype_bytes(c.t));
  }
}

TEST(KvCache, ParseNamesAcceptedValues) {
  EXPECT_EQ(parse_kv_cache_quant("auto"), KvDType::F32);
  EXPECT_EQ(parse_kv_cache_quant("fp8"), KvDType::F8_E4M3);
  EXPECT_EQ(parse_kv_cache_quant("fp8_e5m2"), KvDType::F8_E5M2);
  EXPECT_EQ(parse_kv_cache_quant("bf16"), KvDType::BF16);
  try {
    parse_kv_cache_quant("int4");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_e4m3"), std::string::npos);
  }
}

TEST(KvCache, FullCacheIsAnErrorNotAnOverflow) {
  KvCache cache(small_config(), 2);
  std::vector<float> row(30, 1.0f);
  EXPECT_THROW(cache.store(0, 2, row.data(), row.data()), Error);
  EXPECT_THROW(KvCache(small_config(), 0), Error);
}

}  // namespace
}  // namespace zen

namespace zen {
namespace {

// The batched attention reads give exactly the per-key results, in every precision.
TEST(KvCache, BatchedReadsEqualPerKeyReads) {
  const ModelConfig cfg = small_config();
  const int64_t row = cfg.num_kv_heads * cfg.head_dim;
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (KvDType t : {KvDType::F32, KvDType::BF16, KvDType::F8_E4M3, KvDType::F8_E5M2}) {
    KvCache cache(cfg, 7, t);
    std::vector<float> k(static_cast<size_t>(row)), v(k.size());
    for (int64_t pos = 0; pos < 7; ++pos) {
      for (auto& x : k) x = d(rng);
      for (auto& x : v) x = d(rng);
      cache.store(1, pos, k.data(), v.data());
    }
    std::vector<float> q(static_cast<size_t>(cfg.head_dim)), w(7), scores(7), out(q.size()), want(q.size(), 0.0f);
    for (auto& x : q) x = d(rng);
    for (auto& x : w) x = d(rng);
    cache.key_scores(1, 2, q.data(), 0.5f, 7, scores.data());
    for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(scores[static_cast<size_t>(j)], cache.dot_k(1, j, 2, q.data()) * 0.5f);
    cache.weighted_values(1, 2, w.data(), 7, out.data());
    for (int64_t j = 0; j < 7; ++j) cache.axpy_v(1, j, 2, w[static_cast<size_t>(j)], want.data());
    EXPECT_EQ(out, want) << kv_dtype_name(t);
  }
}

}  // namespace
}  // namespace zen

namespace zen {
namespace {

// A token's row stored through a block table reads back per head from k_rows_f32 /
// v_rows_f32; one head's rows are contiguous within a block and on into the next physical
// block (the layout attention streams); copy_block copies every layer and head of a block and
// nothing else.
TEST(KvPool, HeadRowsAreContiguousAndCopyBlockCopiesEveryHead) {
  const ModelConfig cfg = small_config();
  const int64_t row = cfg.num_kv_heads * cfg.head_dim, bs = 4;
  KvPool pool(cfg, 6, KvDType::F32, bs);
  const std::vector<int32_t> table = {2, 3};  // consecutive physical blocks
  auto value = [&](int layer, int64_t pos, int64_t e, bool is_v) {
    return static_cast<float>(1000 * layer + 10 * pos + e) * (is_v ? -1.0f : 1.0f);
  };
  for (int layer = 0; layer < 2; ++layer)
    for (int64_t pos = 0; pos < 2 * bs; ++pos) {
      std::vector<float> k(static_cast<size_t>(row)), v(k.size());
      for (int64_t e = 0; e < row; ++e) {
        k[static_cast<size_t>(e)] = value(layer, pos, e, false);
        v[static_cast<size_t>(e)] = value(layer, pos, e, true);
      }
      pool.store(layer, table, pos, k.data(), v.data());
    }
  std::vector<float> scratch(static_cast<size_t>(bs * cfg.head_dim));
  for (int layer = 0; layer < 2; ++layer)
    for (int64_t h = 0; h < cfg.num_kv_heads; ++h) {
      int64_t stride = 0;
      const float* k = pool.k_rows_f32(layer, 2, 0, bs, h, scratch.data(), &stride);
      const float* v = pool.v_rows_f32(layer, 2, 0, bs, h, scratch.data(), &stride);
      ASSERT_EQ(stride, cfg.head_dim);
      // Both blocks' rows, read straight on from block 2 into block 3.
      for (int64_t pos = 0; pos < 2 * bs; ++pos)
        for (int64_t i = 0; i < cfg.head_dim; ++i) {
          EXPECT_EQ(k[pos * stride + i], value(layer, pos, h * cfg.head_dim + i, false));
          EXPECT_EQ(v[pos * stride + i], value(layer, pos, h * cfg.head_dim + i, true));
        }
    }
  pool.copy_block(3, 5);
  for (int layer = 0; layer < 2; ++layer)
    for (int64_t h = 0; h < cfg.num_kv_heads; ++h) {
      int64_t stride = 0;
      const float* k = pool.k_rows_f32(layer, 5, 0, bs, h, scratch.data(), &stride);
      const float* v = pool.v_rows_f32(layer, 5, 0, bs, h, scratch.data(), &stride);
      for (int64_t j = 0; j < bs; ++j)
        for (int64_t i = 0; i < cfg.head_dim; ++i) {
          EXPECT_EQ(k[j * stride + i], value(layer, bs + j, h * cfg.head_dim + i, false));
          EXPECT_EQ(v[j * stride + i], value(layer, bs + j, h * cfg.head_dim + i, true));
        }
      // Block 2 (the neighbour of the source) is untouched.
      const float* k2 = pool.k_rows_f32(layer, 2, 0, bs, h, scratch.data(), &stride);
      EXPECT_EQ(k2[0], value(layer, 0, h * cfg.head_dim, false));
    }
  EXPECT_THROW(pool.k_rows_f32(0, 2, 0, bs, cfg.num_kv_heads, scratch.data(), nullptr), Error);
}

}  // namespace
}  // namespace zen
