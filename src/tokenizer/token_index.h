// Token text -> id lookup over the vocabulary's own strings: an open-addressing table of ids
// (no copies of the strings), several times faster to build and probe than
// std::unordered_map<std::string, int>, which dominated loading a 151k-token vocabulary.
// Filled up to 3/4 (the stored hash rejects most probes without touching the text): 2 MB
// for 151k tokens.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/string_table.h"

namespace zen {

class TokenIndex {
 public:
  // texts[id] are the token spellings; the table must outlive the index, and an indexed
  // entry must not change.
  explicit TokenIndex(const StringTable* texts = nullptr) : texts_(texts) {}
  void reset(const StringTable* texts, size_t expected_count);
  // Adds id under texts[id]. Returns the id already stored under that text (which is then
  // replaced when overwrite), or -1 if the text was new.
  int32_t insert(int32_t id, bool overwrite);
  int32_t find(std::string_view text) const;  // -1 if absent

 private:
  struct Slot {
    uint32_t hash = 0;
    int32_t id = -1;
  };
  static uint64_t hash_of(std::string_view s);
  static bool fits(size_t count, size_t slots) { return count * 4 <= slots * 3; }
  void grow();

  const StringTable* texts_;
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

}  // namespace zen
