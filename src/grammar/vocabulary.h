// A tokenizer's vocabulary as the matcher sees it: each token's bytes, sorted into a trie laid
// out in depth-first order, so a mask walk visits each shared prefix once and skips a whole
// subtree with one index jump.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace zen {
class Tokenizer;
}

namespace zen::grammar {

// How one grammar state splits the vocabulary (see matcher.h): tokens allowed whatever lies
// below it on the stack, and tokens to check against the stack.
struct TokenClasses {
  // Allowed ids: listed (few), or as a bitset over the vocabulary (most: inside a string).
  std::vector<int32_t> allowed;
  std::vector<uint64_t> allowed_bits;  // non-empty = this form
  // Tokens to check against the full stack, in trie order, with each one's common prefix
  // length with the one before.
  std::vector<int32_t> uncertain;
  std::vector<uint8_t> uncertain_lcp;
  size_t bytes() const {
    return allowed.size() * 4 + allowed_bits.size() * 8 + uncertain.size() * 5 + sizeof(TokenClasses);
  }
};

class Vocabulary {
 public:
  // token_bytes[i]: token i's bytes; empty for tokens a grammar never produces (special and
  // unused ids). stop_ids: allowed exactly where the grammar may end.
  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids);
  // Non-special tokens of the tokenizer; its stop ids end the output. vocab_size may exceed
  // the tokenizer's (a model's padded lm_head): the extra ids are never allowed.
  // Building it takes ~0.1 s for 150k tokens: make one per tokenizer and share it.
  static std::shared_ptr<const Vocabulary> from_tokenizer(const Tokenizer& tok, int32_t vocab_size = 0);

  // A trie node: the byte on the edge into it; the nodes of its subtree are (index, end);
  // the tokens under it are sorted_[tok_begin, tok_end), those ending exactly here the first
  // own_count of them.
  struct Node {
    int32_t end;
    int32_t tok_begin, tok_end;
    int32_t own_count;
    uint8_t byte;
    uint8_t depth;  // 1 for a first byte (tokens longer than 255 bytes are never allowed)
  };

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t token) const { return bytes_[static_cast<size_t>(token)]; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // Token ids in trie (lexicographic byte) order.
  const std::vector<int32_t>& sorted() const { return sorted_; }

  // Classifications shared between grammars, keyed by a state's structural key (equal keys:
  // the same language from that state on, in any grammar). A JSON string state costs a walk
  // of the whole trie (milliseconds); every later schema reuses it. Bounded in bytes.
  std::shared_ptr<const TokenClasses> shared_classes(const std::string& key) const;
  void share_classes(const std::string& key, std::shared_ptr<const TokenClasses> classes) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;
  std::vector<Node> nodes_;
  std::vector<int32_t> sorted_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenClasses>> shared_;
  mutable size_t shared_bytes_ = 0;
  static constexpr size_t kMaxSharedBytes = size_t{256} << 20;
};

}  // namespace zen::grammar
