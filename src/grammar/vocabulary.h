// A tokenizer's vocabulary as the matcher sees it: each token's bytes, sorted into a trie laid
// out in depth-first order, so a mask walk visits each shared prefix once and skips a whole
// subtree with one index jump.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zen {
class Tokenizer;
}

namespace zen::grammar {

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

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;
  std::vector<Node> nodes_;
  std::vector<int32_t> sorted_;
};

}  // namespace zen::grammar
