// Many short strings indexed by id, stored in one byte arena. A std::string per token costs
// 32 bytes plus a heap block for anything past 15 bytes (~5 MB + fragments for a 151k-token
// vocabulary, and the tokenizer keeps two such lists); here each costs 8 bytes plus its text.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zen {

class StringTable {
 public:
  size_t size() const { return spans_.size(); }
  // Grows to n entries (new ones empty) or drops the entries from n on.
  void resize(size_t n) { spans_.resize(n); }
  void reserve(size_t entries, size_t bytes) {
    spans_.reserve(entries);
    arena_.reserve(bytes);
  }
  // Sets entry i (< size()). The arena only grows: a replaced text's bytes stay behind.
  // `text` may view this table's own bytes.
  void set(size_t i, std::string_view text);
  std::string_view operator[](size_t i) const {
    return std::string_view(arena_.data() + spans_[i].offset, spans_[i].size);
  }
  // Returns the slack of growing by doubling once loading is done.
  void shrink_to_fit() {
    spans_.shrink_to_fit();
    arena_.shrink_to_fit();
  }
  size_t arena_bytes() const { return arena_.size(); }

 private:
  struct Span {
    uint32_t offset = 0, size = 0;
  };
  std::string arena_;
  std::vector<Span> spans_;
};

}  // namespace zen
