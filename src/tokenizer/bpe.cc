#include "tokenizer/bpe.h"

#include <algorithm>

#include "base/scratch.h"
#include "tokenizer/unicode.h"

namespace zen {
namespace {

struct ByteAlphabet {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 324> from_char{};  // the alphabet lies within U+0000..U+0143
  ByteAlphabet() {
    from_char.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_char[b] = printable ? static_cast<uint32_t>(b) : next++;
      from_char[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

uint32_t byte_to_char(uint8_t byte) { return alphabet().to_char[byte]; }

int byte_from_char(uint32_t cp) {
  return cp < alphabet().from_char.size() ? alphabet().from_char[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) unicode::append_utf8(out, byte_to_char(static_cast<uint8_t>(b)));
  return out;
}

bool byte_level_to_bytes(std::string_view text, std::string& bytes) {
  bytes.clear();
  for (size_t pos = 0; pos < text.size();) {
    const unicode::Decoded d = unicode::decode_utf8(text, pos);
    const int b = unicode::is_invalid(d.cp) ? -1 : byte_from_char(d.cp);
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
    pos += d.len;
  }
  return true;
}

const BpeMerges::Slot* BpeMerges::find(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t key = key_of(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;; i = (i + 1) & mask) {
    if (slots_[i].key == key) return &slots_[i];
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

void BpeMerges::rehash(size_t slot_count) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slot_count, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = (s.key * 0x9E3779B97F4A7C15ull) >> 20 & mask;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void BpeMerges::reserve(size_t count) {
  // One allocation of the final size (doubling step by step held 1.5x of it at the peak).
  size_t size = slots_.empty() ? 1024 : slots_.size();
  while (!fits(count, size)) size *= 2;
  if (size != slots_.size()) rehash(size);
}

void BpeMerges::add(int32_t left, int32_t right, int32_t merged, int32_t rank, bool overwrite) {
  if (!fits(count_ + 1, slots_.size())) rehash(slots_.empty() ? 1024 : slots_.size() * 2);
  const uint64_t key = key_of(left, right);
  const size_t mask = slots_.size() - 1;
  size_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
  if (slots_[i].key == key) {
    if (overwrite) slots_[i] = {key, rank, merged};
    return;
  }
  slots_[i] = {key, rank, merged};
  ++count_;
}

void BpeMerges::encode(std::string_view bytes, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;  // -1 once merged into its left neighbour
    int32_t prev, next;
  };
  struct Candidate {
    int32_t rank, pos, left, right;
    // std heap is a max-heap: "less" means later (higher rank, then further right).
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  const ScratchGuard keep_symbols_bounded(symbols);
  const ScratchGuard keep_heap_bounded(heap);
  symbols.clear();
  heap.clear();
  for (char b : bytes) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(b)];
    if (id < 0) continue;  // not in the vocabulary: dropped, as HF does without an unk token
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  const auto consider = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const Slot* s = find(symbols[pos].id, symbols[next].id)) {
      heap.push_back({s->rank, pos, symbols[pos].id, symbols[next].id});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    // Stale if either side changed since the candidate was queued.
    if (left.id != top.left || left.next < 0 || symbols[left.next].id != top.right) continue;
    Symbol& right = symbols[left.next];
    left.id = find(top.left, top.right)->merged;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace zen
