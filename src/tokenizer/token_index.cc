#include "tokenizer/token_index.h"

#include <cstring>

namespace zen {

uint64_t TokenIndex::hash_of(std::string_view s) {
  // FNV-1a over 8-byte words, then a final mix; tokens are short, so this is a few steps.
  uint64_t h = 0xCBF29CE484222325ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001B3ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 32);
}

void TokenIndex::reset(const StringTable* texts, size_t expected_count) {
  texts_ = texts;
  size_t size = 1024;
  while (!fits(expected_count, size)) size *= 2;
  slots_.assign(size, Slot{});
  count_ = 0;
}

void TokenIndex::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

int32_t TokenIndex::insert(int32_t id, bool overwrite) {
  if (!fits(count_ + 1, slots_.size())) grow();
  const std::string_view text = (*texts_)[id];
  const uint32_t hash = static_cast<uint32_t>(hash_of(text));
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.id < 0) {
      s = {hash, id};
      ++count_;
      return -1;
    }
    if (s.hash == hash && (*texts_)[s.id] == text) {
      const int32_t previous = s.id;
      if (overwrite) s.id = id;
      return previous;
    }
  }
}

int32_t TokenIndex::find(std::string_view text) const {
  if (slots_.empty()) return -1;
  const uint32_t hash = static_cast<uint32_t>(hash_of(text));
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return -1;
    if (s.hash == hash && (*texts_)[s.id] == text) return s.id;
  }
}

}  // namespace zen
