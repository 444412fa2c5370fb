// Finding added/special tokens written literally in text, before pre-tokenization. Two
// semantics, one per reference:
//  - HF `tokenizers` (AddedVocabulary): leftmost-longest matches over all added tokens, with
//    their lstrip / rstrip / single_word flags; special ones are left as text when
//    encode_special_tokens (our parse_special == false).
//  - llama.cpp (tokenizer_st_partition): tokens by decreasing length, each splitting every
//    remaining text fragment at all its occurrences.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zen {

struct Fragment {
  int32_t token;       // >= 0: this token; -1: text [begin, end)
  size_t begin, end;   // byte range of the text (meaningful when token < 0)
};

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false;
  bool normalized = false;
};

// HF AddedVocabulary::find_matches over one set of tokens (normalized or not).
class AddedTokenMatcher {
 public:
  void add(const AddedToken& token);
  bool empty() const { return tokens_.empty(); }
  // Splits text into fragments; special tokens are skipped unless parse_special.
  void split(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices, longest first
};

// llama.cpp's partition. tokens: (id, text), matched in the given order (longest first).
void partition_longest_first(std::string_view text,
                             const std::vector<std::pair<int32_t, std::string>>& tokens,
                             std::vector<Fragment>& out);

}  // namespace zen
