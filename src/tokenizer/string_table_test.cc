#include "tokenizer/string_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"

namespace zen {
namespace {

TEST(StringTable, HoldsEntriesSetInAnyOrder) {
  const std::vector<std::string> texts = {"", "a", std::string("nul\0byte", 8), "a long token text past 15 bytes",
                                          "\xC4\xA0the"};
  StringTable table;
  table.resize(texts.size());
  for (size_t i = texts.size(); i-- > 0;) table.set(i, texts[i]);  // last id first
  ASSERT_EQ(table.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(table[i], texts[i]) << i;
}

TEST(StringTable, NewEntriesAreEmptyAndReplacingKeepsTheOthers) {
  StringTable table;
  table.resize(2);
  table.set(0, "first");
  table.resize(4);
  EXPECT_EQ(table[3], "");
  table.set(0, "replaced");
  table.set(3, "fourth");
  EXPECT_EQ(table[0], "replaced");
  EXPECT_EQ(table[1], "");
  EXPECT_EQ(table[3], "fourth");
  table.shrink_to_fit();
  EXPECT_EQ(table[0], "replaced");
  EXPECT_EQ(table[3], "fourth");
}

TEST(StringTable, CopiesAViewOfItsOwnBytesAcrossGrowth) {
  StringTable table;
  table.resize(200);
  table.set(0, "seed text that is copied over and over");
  // Each set views the previous entry while the arena reallocates under it.
  for (size_t i = 1; i < table.size(); ++i) table.set(i, table[i - 1]);
  for (size_t i = 0; i < table.size(); ++i) EXPECT_EQ(table[i], table[0]) << i;
}

TEST(StringTable, OutOfRangeSetIsAnError) {
  StringTable table;
  table.resize(1);
  EXPECT_THROW(table.set(1, "x"), Error);
}

}  // namespace
}  // namespace zen
