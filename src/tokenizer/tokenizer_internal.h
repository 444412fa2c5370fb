// Shared by the tokenizer implementations (not part of the public API).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "tokenizer/string_table.h"
#include "tokenizer/token_index.h"
#include "tokenizer/tokenizer.h"

namespace zen {

// Token attributes, as llama.cpp derives them from GGUF token types (bit flags).
enum TokenAttr : uint8_t {
  kAttrNormal = 1,
  kAttrUnknown = 2,
  kAttrControl = 4,       // special: <|im_start|>, <s>; dropped by decode(skip_special)
  kAttrUserDefined = 8,   // added but not special: <think>, <tool_call>
  kAttrUnused = 16,
  kAttrByte = 32,         // <0xXX> byte-fallback token
  kAttrPresent = 64,      // the id has a token (HF vocabularies may leave holes)
};

// GGUF tokenizer.ggml.token_type values.
uint8_t attr_from_gguf_type(int64_t type);
// llama.cpp marks these end-of-generation / FIM names as control tokens whatever their type.
bool llama_cpp_forces_control(std::string_view text);
// Names of tokens that end a chat turn, added to stop_ids when present.
bool is_stop_token_name(std::string_view text);

std::unique_ptr<Tokenizer> make_bpe_tokenizer_from_json(const nlohmann::json& tokenizer,
                                                        const nlohmann::json& config);
std::unique_ptr<Tokenizer> make_bpe_tokenizer_from_gguf(const GgufFile& gguf);
std::unique_ptr<Tokenizer> make_spm_tokenizer_from_gguf(const GgufFile& gguf);

// llama.cpp's detokenize(): strips the first piece's leading space when the vocabulary adds a
// space prefix (not after a removed BOS), drops special tokens when skip_special, and applies
// clean_spaces. token_text gives each id's piece (empty for skipped ids).
struct LlamaCppDecodeOptions {
  bool add_space_prefix = false;
  bool add_bos = false, add_eos = false;
  int32_t bos_id = -1, eos_id = -1;
  bool clean_spaces = false;
};
std::string llama_cpp_decode(const Tokenizer& tok, const std::vector<int32_t>& ids,
                             bool skip_special, const LlamaCppDecodeOptions& options);

// Helpers for GGUF metadata (arrays are views into the file, valid while it is open).
const GgufStringArray& gguf_string_array(const GgufFile& gguf, const std::string& key,
                                         bool required);
const GgufNumberArray& gguf_number_array(const GgufFile& gguf, const std::string& key);
// tokenizer.ggml.token_type[i] as attributes (normal when the array is absent).
uint8_t gguf_token_attr(const GgufNumberArray& types, size_t i);
int32_t gguf_token_id(const GgufFile& gguf, const std::string& key, int32_t fallback,
                      int32_t vocab_size);

// The vocabulary tables both implementations (byte-level BPE, SentencePiece) share, and the
// Tokenizer accessors built on them. decode() is llama.cpp's; the HF flavour overrides it.
class VocabTokenizer : public Tokenizer {
 public:
  std::string token_bytes(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? std::string(token_bytes_[static_cast<size_t>(id)]) : std::string();
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    return llama_cpp_decode(*this, ids, skip_special, decode_options_);
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(texts_.size()); }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const int32_t id = index_.find(token);
    if (id < 0) return std::nullopt;
    return id;
  }
  bool is_special(int32_t id) const override {
    return id >= 0 && id < vocab_size() && (attrs_[static_cast<size_t>(id)] & (kAttrControl | kAttrUnknown));
  }

 protected:
  StringTable texts_;        // as spelled in the vocabulary
  StringTable token_bytes_;  // what each token decodes to
  std::vector<uint8_t> attrs_;
  TokenIndex index_{&texts_};
  LlamaCppDecodeOptions decode_options_;
};

}  // namespace zen
