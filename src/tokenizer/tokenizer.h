// Tokenizers of the family: byte-level BPE (GPT-2 style; Qwen2/Qwen3, SmolLM2) loaded from a
// tokenizer.json or from GGUF metadata (tokenizer.ggml.model = "gpt2"), and SentencePiece-style
// BPE with scores (tokenizer.ggml.model = "llama", e.g. stories260K). Encoding equals HF
// `tokenizers` (and llama.cpp for GGUF vocabularies).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zen {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // From a tokenizer.json path, a model folder (tokenizer.json + tokenizer_config.json), or a
  // .gguf file. Throws zen::Error on malformed input.
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  static std::unique_ptr<Tokenizer> from_tokenizer_json(const std::string& json_text,
                                                        const std::string& config_json_text = "");
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& gguf);

  // Encodes text. Added/special tokens written literally in the text are recognised when
  // parse_special is true (as HF does by default). With add_bos the model's BOS comes first
  // when the model adds one (HF's add_special_tokens); callers never prepend it themselves.
  virtual std::vector<int32_t> encode(std::string_view text, bool parse_special = true, bool add_bos = true) const = 0;
  // Whether text opens with the BOS token's text (a chat template that writes it itself:
  // then encode without add_bos, or the prompt starts with two BOS).
  bool starts_with_bos_text(std::string_view text) const {
    return !bos_token().empty() && text.substr(0, bos_token().size()) == bos_token();
  }
  // Raw bytes of one token (may be part of a UTF-8 character).
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual bool is_special(int32_t id) const = 0;

  bool add_bos() const { return add_bos_; }
  int32_t bos_id() const { return bos_id_; }  // -1 if none
  int32_t eos_id() const { return eos_id_; }  // -1 if none
  // Tokens that end generation: eos plus e.g. <|im_end|>, <|endoftext|> for chat models.
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  // The chat template text (tokenizer_config.json's chat_template or GGUF
  // tokenizer.chat_template); empty if none.
  const std::string& chat_template() const { return chat_template_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 protected:
  bool add_bos_ = false;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  std::vector<int32_t> stop_ids_;
  std::string chat_template_;
  std::string bos_token_;
  std::string eos_token_;
};

// Turns a token stream into text without ever emitting part of a UTF-8 character: bytes of
// an incomplete character are held until the character completes (or flush()).
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);  // text that is now complete
  std::string flush();           // whatever is held (invalid bytes become U+FFFD)

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace zen
