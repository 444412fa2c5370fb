#include "tokenizer/tokenizer.h"

#include <fstream>

#include "base/error.h"
#include "base/mmap.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

namespace zen {
namespace {

bool has_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

nlohmann::json parse_json(const std::string& text, const char* what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(what, ": invalid JSON: ", e.what());
  }
}

// llama.cpp's clean_spaces passes (GPT-2 style detokenization cleanup), on a copy.
std::string clean_spaces(std::string t) {
  if (t.empty()) return t;
  // 1: " ?", " !", " .", " ," lose the space.
  std::string a(1, t[0]);
  for (size_t i = 1; i < t.size(); ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a.push_back(x);
  }
  // 2: " ' " becomes "'" (the space after it is consumed and reads as NUL afterwards).
  std::string b(1, a[0]);
  for (size_t i = 1; i < a.size(); ++i) {
    const char x = a[i];
    if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      a[++i] = '\0';
    }
    b.push_back(x);
  }
  // 3: " 's", " 'm", " 're", " 've" lose the space.
  std::string c(1, b[0]);
  for (size_t i = 1; i < b.size(); ++i) {
    const char x = b[i];
    if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      if (x1 == 's' || x1 == 'm') {
        c.pop_back();
      } else if (x1 != 't' && x1 != 'd' && i + 2 < b.size()) {
        const char x2 = b[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) c.pop_back();
      }
    }
    c.push_back(x);
  }
  return c;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  if (is_directory(path)) {
    const std::string json_path = path + "/tokenizer.json";
    if (!file_exists(json_path)) fail(path, ": no tokenizer.json in this folder");
    const std::string config_path = path + "/tokenizer_config.json";
    return from_tokenizer_json(read_text_file(json_path),
                               file_exists(config_path) ? read_text_file(config_path) : "");
  }
  if (!file_exists(path)) fail(path, ": no such file");
  if (has_gguf_magic(path)) {
    const GgufFile gguf(path);
    return from_gguf(gguf);
  }
  const std::string config_path = directory_of(path) + "/tokenizer_config.json";
  return from_tokenizer_json(read_text_file(path),
                             file_exists(config_path) ? read_text_file(config_path) : "");
}

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(const std::string& json_text,
                                                          const std::string& config_json_text) {
  const nlohmann::json root = parse_json(json_text, "tokenizer.json");
  nlohmann::json config = nlohmann::json::object();
  if (!config_json_text.empty()) {
    config = parse_json(config_json_text, "tokenizer_config.json");
    if (!config.is_object()) fail("tokenizer_config.json: not a JSON object");
  }
  try {
    return make_bpe_tokenizer_from_json(root, config);
  } catch (const nlohmann::json::exception& e) {  // a type mismatch the checks did not name
    fail("tokenizer.json: ", e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& gguf) {
  const std::optional<std::string> model = gguf.get_string("tokenizer.ggml.model");
  if (!model) fail(gguf.path(), ": no tokenizer (tokenizer.ggml.model missing)");
  if (*model == "gpt2") return make_bpe_tokenizer_from_gguf(gguf);
  if (*model == "llama") return make_spm_tokenizer_from_gguf(gguf);
  fail(gguf.path(), ": unsupported tokenizer model '", *model, "'");
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    out += token_bytes(id);
  }
  return out;
}

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tok_.token_bytes(id);
  const size_t complete = unicode::complete_utf8_prefix(pending_);
  std::string out = unicode::sanitize_utf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

// ---------------------------------------------------------------------------------------
// Shared helpers

uint8_t attr_from_gguf_type(int64_t type) {
  switch (type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return 0;  // undefined: decodes to nothing
  }
}

bool llama_cpp_forces_control(std::string_view text) {
  // End-of-generation and fill-in-the-middle names llama.cpp recognises (llama-vocab.cpp).
  if (text.size() < 3) return false;
  static constexpr std::string_view kNames[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
      "<|end_of_text|>", "<EOT>", "_<EOT>", "<|eom_id|>", "<end_of_utterance>", "</s>",
      "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xE2\x96\x81<PRE>",
      "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xE2\x96\x81<SUF>",
      "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xE2\x96\x81<MID>",
      "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>",
      "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"};
  for (std::string_view name : kNames) {
    if (text == name) return true;
  }
  return false;
}

bool is_stop_token_name(std::string_view text) {
  return text == "<|im_end|>" || text == "<|endoftext|>" || text == "<|eot_id|>" ||
         text == "<|end_of_text|>" || text == "<end_of_turn>" || text == "<|eom_id|>";
}

std::string llama_cpp_decode(const Tokenizer& tok, const std::vector<int32_t>& ids,
                             bool skip_special, const LlamaCppDecodeOptions& options) {
  size_t begin = 0, end = ids.size();
  bool remove_space = options.add_space_prefix;
  if (skip_special && options.add_bos && end > 0 && ids[0] == options.bos_id) {
    remove_space = false;  // llama.cpp keeps the space when it drops the BOS
    begin = 1;
  }
  if (skip_special && options.add_eos && end > begin && ids[end - 1] == options.eos_id) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    std::string piece = skip_special && tok.is_special(ids[i]) ? "" : tok.token_bytes(ids[i]);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    out += piece;
  }
  return options.clean_spaces ? clean_spaces(std::move(out)) : out;
}

const GgufStringArray& gguf_string_array(const GgufFile& gguf, const std::string& key,
                                         bool required) {
  static const GgufStringArray kNone;
  const GgufValue* v = gguf.find(key);
  if (v == nullptr) {
    if (required) fail(gguf.path(), ": missing ", key);
    return kNone;
  }
  if (v->type != GgufType::ARRAY || v->array_type != GgufType::STRING) {
    fail(gguf.path(), ": ", key, " is not an array of strings");
  }
  return v->strings;
}

const GgufNumberArray& gguf_number_array(const GgufFile& gguf, const std::string& key) {
  static const GgufNumberArray kNone;
  const GgufValue* v = gguf.find(key);
  if (v == nullptr) return kNone;
  if (v->type != GgufType::ARRAY || v->array_type == GgufType::STRING ||
      v->array_type == GgufType::ARRAY) {
    fail(gguf.path(), ": ", key, " is not an array of numbers");
  }
  return v->numbers;
}

uint8_t gguf_token_attr(const GgufNumberArray& types, size_t i) {
  if (types.empty()) return kAttrNormal;
  const double t = types[i];
  return t >= 0 && t <= 6 ? attr_from_gguf_type(static_cast<int64_t>(t)) : 0;
}

int32_t gguf_token_id(const GgufFile& gguf, const std::string& key, int32_t fallback,
                      int32_t vocab_size) {
  // -1 / 0xFFFFFFFF mean "none" (llama.cpp keeps the default then); any other id outside the
  // vocabulary is a broken file, refused by name (llama.cpp only warns).
  if (fallback >= vocab_size) fallback = -1;
  const std::optional<int64_t> id = gguf.get_int(key);
  if (!id || *id == -1 || *id == 0xFFFFFFFF) return fallback;
  if (*id < 0 || *id >= vocab_size) fail(gguf.path(), ": ", key, " = ", *id, " is outside the vocabulary [0, ", vocab_size, ")");
  return static_cast<int32_t>(*id);
}

}  // namespace zen
