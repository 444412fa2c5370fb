// The sliding layers' window store: rows read back where the target block put them, a row
// never stored reads as missing, and a full store recycles its least recently used block.
#include "spec/dflash/window_store.h"

#include <gtest/gtest.h>

#include <vector>

namespace zen::spec::dflash {
namespace {

// Two sliding layers of 2 KV heads of 4: a row is 8 floats.
ModelConfig two_layers() {
  ModelConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  return c;
}

// Layer l's K row at a position: every element l * 1000 + pos (V: negated).
std::vector<float> row(int layer, int64_t pos, float sign = 1) {
  return std::vector<float>(8, sign * static_cast<float>(layer * 1000 + pos));
}

void put(WindowStore& s, int32_t target_block, int64_t pos) {
  const auto k0 = row(0, pos), k1 = row(1, pos), v0 = row(0, pos, -1), v1 = row(1, pos, -1);
  const float* k[] = {k0.data(), k1.data()};
  const float* v[] = {v0.data(), v1.data()};
  s.store(target_block, pos % s.block_size(), k, v);
}

TEST(WindowStore, BlocksPerSequenceCoverAWindowAtAnyAlignment) {
  EXPECT_EQ(WindowStore::blocks_per_sequence(1, 16), 0);   // a window of one sees no context
  EXPECT_EQ(WindowStore::blocks_per_sequence(2, 16), 1);   // one row
  EXPECT_EQ(WindowStore::blocks_per_sequence(5, 16), 2);   // 4 rows can straddle a boundary
  EXPECT_EQ(WindowStore::blocks_per_sequence(17, 16), 2);  // 16 rows: one block if aligned, else two
  EXPECT_EQ(WindowStore::blocks_per_sequence(18, 16), 2);  // 17 rows: two at any alignment
  EXPECT_EQ(WindowStore::blocks_per_sequence(19, 16), 3);  // 18 rows from slot 15: 1 + 16 + 1
  EXPECT_EQ(WindowStore::blocks_per_sequence(2048, 16), 129);
  // 2 layers x K and V x 8 floats x 4 bytes = 128 bytes a row; 16 rows a block.
  EXPECT_EQ(WindowStore::bytes(two_layers(), 5, 16, 3), size_t{128 * 16 * 2 * 3});
}

TEST(WindowStore, RowsReadBackAndUnstoredRowsAreMissing) {
  WindowStore s(two_layers(), 5, /*target_blocks=*/10, /*block_size=*/4, /*max_seqs=*/2);
  EXPECT_EQ(s.num_blocks(), 2 * 2);  // 4 rows span at most 2 blocks of 4
  put(s, 7, 13);  // position 13: slot 1 of target block 7
  for (int l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 2; ++h) {
      const float* k = s.k_row(l, 7, 1, h);
      const float* v = s.v_row(l, 7, 1, h);
      ASSERT_NE(k, nullptr);
      ASSERT_NE(v, nullptr);
      EXPECT_EQ(std::vector<float>(k, k + 4), std::vector<float>(4, static_cast<float>(l * 1000 + 13)));
      EXPECT_EQ(std::vector<float>(v, v + 4), std::vector<float>(4, -static_cast<float>(l * 1000 + 13)));
    }
  EXPECT_EQ(s.k_row(0, 7, 0, 0), nullptr) << "slot 0 of a mapped block was never stored";
  EXPECT_EQ(s.k_row(0, 6, 1, 0), nullptr) << "an unmapped target block";
  EXPECT_EQ(s.k_row(0, 99, 1, 0), nullptr) << "a target block outside the pool";
  EXPECT_EQ(s.blocks_in_use(), 1);
}

TEST(WindowStore, AFullStoreRecyclesTheLeastRecentlyUsedBlock) {
  WindowStore s(two_layers(), 8, /*target_blocks=*/8, /*block_size=*/4, /*max_seqs=*/1);
  ASSERT_EQ(s.num_blocks(), 3);  // 7 rows from slot 3: 1 + 4 + 2
  put(s, 0, 0);
  put(s, 1, 4);
  put(s, 2, 8);
  s.touch(0);    // block 0 read since: block 1 is now the oldest
  put(s, 3, 12);  // needs a fourth block
  EXPECT_EQ(s.blocks_in_use(), 3);
  EXPECT_EQ(s.k_row(0, 1, 0, 0), nullptr) << "the recycled block's rows are missing, not another's";
  EXPECT_NE(s.k_row(0, 0, 0, 0), nullptr);
  EXPECT_NE(s.k_row(0, 2, 0, 0), nullptr);
  const float* k = s.k_row(1, 3, 0, 1);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k[0], 1012.0f);
  // The recycled block starts empty: its other slots are missing until stored.
  EXPECT_EQ(s.k_row(0, 3, 1, 0), nullptr);
  put(s, 1, 5);  // target block 1 again: mapped anew, only slot 1 held
  EXPECT_EQ(s.k_row(0, 1, 0, 0), nullptr);
  EXPECT_NE(s.k_row(0, 1, 1, 0), nullptr);
}

}  // namespace
}  // namespace zen::spec::dflash
