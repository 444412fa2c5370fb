// BlockManager and StateCache invariants: reference counts, prefix matching with token
// checks, LRU reuse of cached blocks, no leaks after any mix of operations.
#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <random>

#include "engine/state_cache.h"

namespace zen {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = start + i;
  return t;
}

// Registers every full block of a table as the engine does after a step.
void register_all(BlockManager& bm, const std::vector<int32_t>& table, const std::vector<int32_t>& tokens) {
  uint64_t parent = 0;
  const auto bs = static_cast<size_t>(bm.block_size());
  for (size_t b = 0; (b + 1) * bs <= tokens.size(); ++b)
    parent = bm.register_full(table[b], parent, std::span<const int32_t>(tokens).subspan(b * bs, bs));
}

TEST(BlockManager, GrowReleaseAndRefCounts) {
  BlockManager bm(8, 4, true);
  std::vector<int32_t> a;
  ASSERT_TRUE(bm.grow(a, 9));  // 3 blocks
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(bm.num_free(), 5);
  std::vector<int32_t> b;
  EXPECT_FALSE(bm.grow(b, 24));  // 6 blocks > 5 free: unchanged
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(bm.num_free(), 5);
  bm.shrink(a, 4);
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(bm.num_free(), 7);
  bm.release(a);
  EXPECT_EQ(bm.num_free(), 8);
  for (int32_t i = 0; i < 8; ++i) EXPECT_EQ(bm.ref_count(i), 0);
}

TEST(BlockManager, PrefixMatchSharesFullBlocksOnly) {
  BlockManager bm(16, 4, true);
  const auto tokens = iota_tokens(10);
  std::vector<int32_t> a;
  ASSERT_TRUE(bm.grow(a, 10));
  register_all(bm, a, tokens);  // blocks 0 and 1 are full; the third holds 2 tokens
  EXPECT_EQ(bm.cached_blocks(), 2);

  auto longer = iota_tokens(12);
  const auto m = bm.match_prefix(longer);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.blocks[0], a[0]);
  EXPECT_EQ(m.blocks[1], a[1]);
  bm.acquire(m.blocks);
  EXPECT_EQ(bm.ref_count(a[0]), 2);

  // A different second block matches only the first.
  auto diverging = iota_tokens(8);
  diverging[5] = 99;
  EXPECT_EQ(bm.match_prefix(diverging).blocks.size(), 1u);
  // The hash chain includes the parent: the same block content after another prefix misses.
  auto shifted = iota_tokens(8, 4);
  EXPECT_EQ(bm.match_prefix(shifted).blocks.size(), 0u);

  std::vector<int32_t> shared(m.blocks);
  bm.release(shared);
  bm.release(a);
  EXPECT_EQ(bm.num_free(), 16);
  // Released cached blocks stay findable until reused.
  EXPECT_EQ(bm.match_prefix(longer).blocks.size(), 2u);
}

TEST(BlockManager, CachedBlocksAreEvictedLeastRecentlyUsedAndUncachedFirst) {
  BlockManager bm(4, 2, true);
  const auto t1 = iota_tokens(4, 0), t2 = iota_tokens(4, 100);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(bm.grow(a, 4));
  register_all(bm, a, t1);
  bm.release(a);
  ASSERT_TRUE(bm.grow(b, 4));  // must take the two blocks never cached, not t1's
  register_all(bm, b, t2);
  EXPECT_EQ(bm.match_prefix(t1).blocks.size(), 2u);
  bm.release(b);
  std::vector<int32_t> c;
  ASSERT_TRUE(bm.grow(c, 4));  // everything is cached now: t1's blocks are the oldest
  EXPECT_EQ(bm.match_prefix(t1).blocks.size(), 0u);
  EXPECT_EQ(bm.match_prefix(t2).blocks.size(), 2u);
  bm.release(c);
}

TEST(BlockManager, PrefixCacheOffNeverMatches) {
  BlockManager bm(4, 2, false);
  const auto t = iota_tokens(4);
  std::vector<int32_t> a;
  ASSERT_TRUE(bm.grow(a, 4));
  register_all(bm, a, t);
  EXPECT_TRUE(bm.match_prefix(t).blocks.empty());
  bm.release(a);
}

// Random interleavings of grow / share / shrink / release: every block's count equals the
// number of tables holding it, and everything returns to free at the end.
TEST(BlockManager, RandomOperationsNeverLeak) {
  std::mt19937 rng(7);
  BlockManager bm(32, 4, true);
  std::vector<std::vector<int32_t>> tables(6);
  std::vector<std::vector<int32_t>> contents(6);
  for (int op = 0; op < 3000; ++op) {
    const size_t i = rng() % tables.size();
    switch (rng() % 4) {
      case 0: {
        const int n = static_cast<int>(rng() % 20) + 1;
        if (tables[i].empty()) {
          contents[i] = iota_tokens(n, static_cast<int32_t>(rng() % 3) * 8);
          const auto m = bm.match_prefix(contents[i]);
          tables[i] = m.blocks;
          bm.acquire(tables[i]);
        }
        if (bm.grow(tables[i], static_cast<int64_t>(contents[i].size()))) register_all(bm, tables[i], contents[i]);
        break;
      }
      case 1: bm.shrink(tables[i], static_cast<int64_t>(rng() % 8)); break;
      default: bm.release(tables[i]); contents[i].clear(); break;
    }
    std::vector<int32_t> expected(32, 0);
    for (const auto& t : tables)
      for (int32_t b : t) ++expected[static_cast<size_t>(b)];
    int64_t used = 0;
    for (int32_t b = 0; b < 32; ++b) {
      ASSERT_EQ(bm.ref_count(b), expected[static_cast<size_t>(b)]) << "block " << b << " after op " << op;
      used += expected[static_cast<size_t>(b)] > 0 ? 1 : 0;
    }
    ASSERT_EQ(bm.num_used(), used);
  }
  for (auto& t : tables) bm.release(t);
  EXPECT_EQ(bm.num_free(), 32);
}

TEST(StateCache, SlotsSnapshotsAndLru) {
  StateCache sc(3, 2, 2);
  const int32_t a = sc.allocate(), b = sc.allocate();
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_EQ(sc.allocate(), -1);
  sc.pool().slot(a)[0] = 1.0f;
  sc.save_snapshot(11, a);
  sc.pool().slot(a)[0] = 2.0f;
  sc.save_snapshot(22, a);
  sc.pool().slot(a)[0] = 3.0f;
  sc.save_snapshot(33, a);  // evicts 11, the least recently used
  EXPECT_FALSE(sc.has_snapshot(11));
  ASSERT_TRUE(sc.restore_snapshot(22, b));
  EXPECT_EQ(sc.pool().slot(b)[0], 2.0f);
  sc.release(a);
  const int32_t c = sc.allocate();
  EXPECT_EQ(c, a);
  EXPECT_EQ(sc.pool().slot(c)[0], 0.0f);  // a new sequence starts from a zero state
  EXPECT_EQ(sc.snapshots(), 2);
}

}  // namespace
}  // namespace zen
