// Byte-level BPE (GPT-2 style): the byte <-> character alphabet, and merging by rank over
// token ids with a heap over a linked list of symbols (lowest rank first, then leftmost:
// the order of HF `tokenizers` and llama.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zen {

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to U+0100 onwards.
uint32_t byte_to_char(uint8_t byte);
// Inverse of byte_to_char; -1 for characters outside the alphabet.
int byte_from_char(uint32_t cp);
// The byte-level spelling of raw bytes (each byte -> its character, UTF-8 encoded).
std::string bytes_to_byte_level(std::string_view bytes);
// Raw bytes of a byte-level spelling; false if a character is outside the alphabet.
bool byte_level_to_bytes(std::string_view text, std::string& bytes);

class BpeMerges {
 public:
  // byte_tokens[b]: id of the token spelling byte b, or -1 when the vocabulary lacks it.
  void set_byte_tokens(const std::array<int32_t, 256>& byte_tokens) { byte_tokens_ = byte_tokens; }
  // Adds the merge (left, right) -> merged; lower ranks merge first. A pair already present
  // keeps its first entry unless overwrite (HF builds a map from the list: the last one wins).
  void add(int32_t left, int32_t right, int32_t merged, int32_t rank, bool overwrite);
  void reserve(size_t count);
  size_t size() const { return count_; }
  // Appends the ids of one pre-tokenized piece (raw bytes).
  void encode(std::string_view bytes, std::vector<int32_t>& out) const;

 private:
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key_of(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Slot* find(int32_t left, int32_t right) const;
  // Filled up to 3/4: 4 MB for 151k merges; a miss scans a few adjacent 16-byte slots.
  static bool fits(size_t count, size_t slots) { return count * 4 <= slots * 3; }
  void rehash(size_t slot_count);

  std::array<int32_t, 256> byte_tokens_{};
  std::vector<Slot> slots_;  // open addressing, linear probing, power-of-two size
  size_t count_ = 0;
};

}  // namespace zen
