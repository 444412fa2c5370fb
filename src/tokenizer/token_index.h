// Token text -> id lookup over the vocabulary's own strings: an open-addressing table of ids
// (no copies of the strings), several times faster to build and probe than
// std::unordered_map<std::string, int>, which dominated loading a 151k-token vocabulary.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zen {

class TokenIndex {
 public:
  // texts[id] are the token spellings; the vector must outlive the index and not change.
  explicit TokenIndex(const std::vector<std::string>* texts = nullptr) : texts_(texts) {}
  void reset(const std::vector<std::string>* texts, size_t expected_count);
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
  void grow();

  const std::vector<std::string>* texts_;
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

}  // namespace zen
