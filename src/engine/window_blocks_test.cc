// The window pool's bookkeeping: windows pinned and bounded, blocks behind a window recycled,
// a row that is not held never read, a cached prefix usable only while its window is held.
#include "engine/window_blocks.h"

#include <gtest/gtest.h>

#include <numeric>

#include "base/error.h"

namespace zen {
namespace {

std::vector<int32_t> ids(int32_t first, int32_t count) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// One step of one sequence: pins, then the table of its slice [pos, pos + n).
std::vector<int32_t> step(WindowBlocks& w, std::span<const int32_t> blocks, int64_t pos, int64_t n) {
  w.begin_step();
  w.pin(blocks, pos);
  std::vector<int32_t> table;
  w.table(blocks, pos, n, table);
  return table;
}

TEST(WindowBlocks, ADecodingSequenceHoldsItsWindowOnly) {
  const int64_t bs = 4, window = 7;
  const int64_t pool = WindowBlocks::blocks_needed(window, bs, 1, 9);
  WindowBlocks w(pool, 64, bs, window);
  const auto blocks = ids(10, 60);  // main-pool blocks 10..69 for positions 0..239
  auto table = step(w, blocks, 0, 9);  // a 9-token prompt: blocks 0..2 written
  EXPECT_NE(table[0], -1);
  EXPECT_NE(table[2], -1);
  for (int64_t pos = 9; pos < 200; ++pos) {
    table = step(w, blocks, pos, 1);
    // Blocks before the window of position pos (keys from pos - 6 on) are not in the table.
    const int64_t first = (pos - window + 1) / bs;
    for (int64_t i = 0; i < first; ++i) ASSERT_EQ(table[static_cast<size_t>(i)], -1) << pos;
    for (int64_t i = first; i <= pos / bs; ++i) ASSERT_GE(table[static_cast<size_t>(i)], 0) << pos;
    EXPECT_LE(w.blocks_pinned(), (window - 1 + bs - 1) / bs + 1);
    EXPECT_LE(w.blocks_held(), pool);
  }
}

TEST(WindowBlocks, ARowThatIsNotHeldIsNeverRead) {
  const int64_t bs = 4, window = 6;
  WindowBlocks w(4, 64, bs, window);
  const auto a = ids(0, 8), b = ids(20, 8);
  step(w, a, 0, 8);  // a writes blocks 0, 1
  // b writes 16 tokens while a is not pinned (an engine that forgot a): a's blocks are recycled.
  w.begin_step();
  std::vector<int32_t> table;
  w.table(b, 0, 16, table);
  w.begin_step();
  w.pin(a, 8);
  EXPECT_THROW(w.table(a, 8, 1, table), Error);  // a's window (positions 3..7) is gone
  EXPECT_FALSE(w.holds_window(a, 8));
  EXPECT_TRUE(w.holds_window(b, 16));
}

TEST(WindowBlocks, PinnedWindowsAreNotRecycledAndFullPinsFailLoudly) {
  const int64_t bs = 4, window = 5;
  WindowBlocks w(3, 64, bs, window);
  const auto a = ids(0, 8), b = ids(20, 8);
  step(w, a, 0, 6);  // blocks 0, 1 of a
  w.begin_step();
  w.pin(a, 6);  // a's window 2..5: both blocks
  std::vector<int32_t> table;
  w.table(b, 0, 4, table);  // b takes the last free block
  EXPECT_THROW(w.table(b, 4, 4, table), Error);  // nothing left that is not pinned
  w.begin_step();
  w.pin(a, 6);
  w.table(a, 6, 1, table);  // a's rows survived
  EXPECT_GE(table[0], 0);
}

TEST(WindowBlocks, BlocksAreRecycledLeastRecentlyUsedFirst) {
  const int64_t bs = 4, window = 5;
  WindowBlocks w(3, 64, bs, window);
  const auto a = ids(0, 4), b = ids(10, 4), c = ids(20, 4), d = ids(30, 4), e = ids(40, 4);
  step(w, a, 0, 4);  // the three blocks go to a, b, c in turn
  step(w, b, 0, 4);
  step(w, c, 0, 4);
  w.begin_step();
  w.pin(a, 4);  // a's window (positions 0..3) read again: b is now the oldest
  std::vector<int32_t> table;
  w.table(d, 0, 4, table);  // no free block: b's goes
  EXPECT_FALSE(w.holds_window(b, 4));
  EXPECT_TRUE(w.holds_window(a, 4));
  EXPECT_TRUE(w.holds_window(c, 4));
  step(w, e, 0, 4);  // then c's, the oldest left
  EXPECT_FALSE(w.holds_window(c, 4));
  EXPECT_TRUE(w.holds_window(a, 4));
  EXPECT_TRUE(w.holds_window(d, 4));
  EXPECT_EQ(w.blocks_held(), 3);
}

TEST(WindowBlocks, ACachedPrefixIsUsableWhileItsWindowIsHeld) {
  const int64_t bs = 4, window = 6;
  WindowBlocks w(8, 64, bs, window);
  const auto a = ids(0, 4);
  step(w, a, 0, 16);  // a finished 16 tokens
  EXPECT_TRUE(w.holds_window(a, 16));
  EXPECT_TRUE(w.holds_window(a, 8));
  EXPECT_TRUE(w.holds_window(a, 0));
  // A sequence that shares a's first 3 blocks and goes on elsewhere.
  std::vector<int32_t> c = {0, 1, 2, 40, 41};
  step(w, c, 12, 8);
  EXPECT_TRUE(w.holds_window(c, 20));
  // A fresh pool holds none of a's rows: a slice that reads them fails instead of reading
  // whatever the memory holds.
  WindowBlocks fresh(8, 64, bs, window);
  std::vector<int32_t> table;
  fresh.begin_step();
  EXPECT_THROW(fresh.table(a, 10, 2, table), Error);
  EXPECT_FALSE(fresh.holds_window(a, 8));
}

}  // namespace
}  // namespace zen
