// Byte-level BPE tokenizers: HF tokenizer.json (Qwen2/Qwen3 ...) and GGUF "gpt2" vocabularies.
// The two sources share the BPE and pre-tokenizers; they differ where their references differ:
// HF normalizes (NFC) and matches added tokens leftmost-longest with their flags; llama.cpp
// does not normalize and partitions special tokens longest-first.
#include <algorithm>

#include "base/error.h"
#include "base/scratch.h"
#include "io/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/token_index.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

namespace zen {
namespace {

using json = nlohmann::json;

constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class ByteLevelBpeTokenizer final : public VocabTokenizer {
 public:
  enum class Flavor { kHuggingFace, kLlamaCpp };

  explicit ByteLevelBpeTokenizer(Flavor flavor) : flavor_(flavor) {}

  std::vector<int32_t> encode(std::string_view text, bool parse_special, bool add_bos) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    if (flavor_ == Flavor::kHuggingFace) return Tokenizer::decode(ids, skip_special);
    return VocabTokenizer::decode(ids, skip_special);
  }

  // Loading (the loaders below fill these in order).
  void set_token(int32_t id, std::string_view text, uint8_t attr);
  void finish_vocab();  // byte tokens, decoded bytes
  void add_merge(std::string_view left, std::string_view right, int32_t rank);
  void reserve(size_t tokens, size_t text_bytes, size_t merges) {
    texts_.reserve(tokens, text_bytes);
    attrs_.reserve(tokens);
    merges_.reserve(merges);
  }
  struct Specials {
    int32_t bos_id = -1, eos_id = -1;
    bool add_bos = false, add_eos = false;
    std::string bos_text, eos_text;  // empty: the token's own text
    std::string chat_template;
  };
  void finish_special(const Specials& s);
  void build_special_cache();

  using VocabTokenizer::decode_options_;  // set by the GGUF loader below
  Flavor flavor_;
  PreTokenizer pre_;
  bool nfc_ = false;
  bool ignore_merges_ = false;
  bool add_eos_ = false;
  AddedTokenMatcher raw_added_;         // HF: matched on the raw text
  AddedTokenMatcher normalized_added_;  // HF: matched on the normalized text
  std::vector<std::pair<int32_t, std::string>> special_cache_;  // llama.cpp, longest first
  std::vector<std::pair<int32_t, std::string>> parse_always_;   // ... without control/unknown

 private:
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

  BpeMerges merges_;
  std::string scratch_;  // merge concatenation while loading
};

void ByteLevelBpeTokenizer::set_token(int32_t id, std::string_view text, uint8_t attr) {
  if (id < 0) fail("tokenizer: negative token id ", id);
  if (id >= (1 << 24)) fail("tokenizer: token id ", id, " is implausibly large");
  if (static_cast<size_t>(id) >= texts_.size()) {
    texts_.resize(id + 1);
    attrs_.resize(id + 1, 0);
  }
  // An added token may take over a vocabulary id; two vocabulary tokens may not share one.
  if (attrs_[id] != 0 && attr == kAttrNormal) fail("tokenizer: token id ", id, " is used twice");
  texts_.set(static_cast<size_t>(id), text);
  attrs_[id] = attr | kAttrPresent;
}

void ByteLevelBpeTokenizer::finish_vocab() {
  // Text -> id. HF: added tokens win over vocabulary entries with the same text; llama.cpp
  // refuses duplicate texts.
  texts_.shrink_to_fit();
  index_.reset(&texts_, texts_.size());
  for (int32_t pass = 0; pass < 2; ++pass) {
    for (int32_t id = 0; id < vocab_size(); ++id) {
      const bool added = attrs_[id] & (kAttrControl | kAttrUserDefined);
      if (attrs_[id] == 0 || (pass == 1 && !(added && flavor_ == Flavor::kHuggingFace))) continue;
      const int32_t previous = index_.insert(id, /*overwrite=*/true);
      if (pass == 0 && previous >= 0 && flavor_ == Flavor::kLlamaCpp) {
        fail("GGUF: duplicate token '", texts_[id], "' (ids ", previous, " and ", id, ")");
      }
    }
  }
  std::array<int32_t, 256> byte_tokens;
  for (int b = 0; b < 256; ++b) {
    byte_tokens[b] = index_.find(bytes_to_byte_level(std::string(1, static_cast<char>(b))));
  }
  merges_.set_byte_tokens(byte_tokens);
  token_bytes_.resize(texts_.size());
  token_bytes_.reserve(texts_.size(), texts_.arena_bytes());  // decoding never lengthens a text
  std::string bytes;
  for (size_t id = 0; id < texts_.size(); ++id) {
    const uint8_t attr = attrs_[id];
    if (attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      token_bytes_.set(id, texts_[id]);  // added tokens decode to their content
    } else if (attr & kAttrNormal) {
      // HF's ByteLevel decoder keeps a token verbatim if it is not in the byte alphabet.
      token_bytes_.set(id, byte_level_to_bytes(texts_[id], bytes) ? std::string_view(bytes) : texts_[id]);
    }
    // Unused / undefined tokens decode to nothing (llama.cpp).
  }
  token_bytes_.shrink_to_fit();
}

void ByteLevelBpeTokenizer::add_merge(std::string_view left, std::string_view right,
                                      int32_t rank) {
  scratch_.assign(left);
  scratch_.append(right);
  const int32_t l = index_.find(left), r = index_.find(right), m = index_.find(scratch_);
  if (l < 0 || r < 0 || m < 0) {
    if (flavor_ == Flavor::kHuggingFace) {
      fail("tokenizer.json: merge ", rank, " ('", left, "' '", right,
           "') uses a token missing from the vocabulary");
    }
    return;  // llama.cpp would keep it, but it can never produce a vocabulary token
  }
  merges_.add(l, r, m, rank,
              /*overwrite=*/flavor_ == Flavor::kHuggingFace);
}

void ByteLevelBpeTokenizer::finish_special(const Specials& s) {
  bos_id_ = s.bos_id;
  eos_id_ = s.eos_id;
  add_bos_ = s.add_bos;
  add_eos_ = s.add_eos;
  bos_token_ = s.bos_text;
  eos_token_ = s.eos_text;
  chat_template_ = s.chat_template;
  if (bos_id_ >= vocab_size()) bos_id_ = -1;
  if (eos_id_ >= vocab_size()) eos_id_ = -1;
  if (add_bos_ && bos_id_ < 0) fail("tokenizer: adds a BOS token but has none");
  if (add_eos_ && eos_id_ < 0) fail("tokenizer: adds an EOS token but has none");
  if (bos_id_ >= 0 && bos_token_.empty()) bos_token_ = texts_[bos_id_];
  if (eos_id_ >= 0 && eos_token_.empty()) eos_token_ = texts_[eos_id_];
  if (eos_id_ >= 0) stop_ids_.push_back(eos_id_);
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (id != eos_id_ && is_stop_token_name(texts_[id])) stop_ids_.push_back(id);
  }
  decode_options_.add_bos = add_bos_;
  decode_options_.add_eos = add_eos_;
  decode_options_.bos_id = bos_id_;
  decode_options_.eos_id = eos_id_;
}

void ByteLevelBpeTokenizer::build_special_cache() {
  // llama.cpp: control, user-defined and unknown tokens, longest first (ties by id here;
  // llama.cpp's std::sort leaves them unspecified).
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (attrs_[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) ids.push_back(id);
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return texts_[a].size() > texts_[b].size();
  });
  for (int32_t id : ids) {
    special_cache_.emplace_back(id, texts_[id]);
    // Without parse_special, user-defined tokens are still matched (HF does the same).
    if (!(attrs_[id] & (kAttrControl | kAttrUnknown))) parse_always_.emplace_back(id, texts_[id]);
  }
}

std::vector<int32_t> ByteLevelBpeTokenizer::encode(std::string_view text, bool parse_special, bool add_bos) const {
  if (text.size() >= UINT32_MAX) fail("tokenizer: text of ", text.size(), " bytes is too long");
  std::vector<int32_t> out;
  if (add_bos && add_bos_) out.push_back(bos_id_);
  std::vector<Fragment> fragments;
  if (flavor_ == Flavor::kHuggingFace) {
    raw_added_.split(text, parse_special, fragments);
  } else {
    partition_longest_first(text, parse_special ? special_cache_ : parse_always_, fragments);
  }
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
    } else if (flavor_ == Flavor::kLlamaCpp || (!nfc_ && normalized_added_.empty())) {
      encode_text(text.substr(f.begin, f.end - f.begin), out);
    } else {
      const std::string normalized = nfc_ ? unicode::nfc(text.substr(f.begin, f.end - f.begin))
                                          : std::string(text.substr(f.begin, f.end - f.begin));
      std::vector<Fragment> inner;
      normalized_added_.split(normalized, parse_special, inner);
      for (const Fragment& g : inner) {
        if (g.token >= 0) {
          out.push_back(g.token);
        } else {
          encode_text(std::string_view(normalized).substr(g.begin, g.end - g.begin), out);
        }
      }
    }
  }
  if (add_eos_) out.push_back(eos_id_);
  return out;
}

void ByteLevelBpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::vector<PreTokenizer::Piece> pieces;
  const ScratchGuard keep_bounded(pieces);
  pieces.clear();
  pre_.split(text, pieces);
  for (const auto& p : pieces) encode_piece(text.substr(p.begin, p.end - p.begin), out);
}

void ByteLevelBpeTokenizer::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const int32_t id = index_.find(bytes_to_byte_level(bytes));
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  merges_.encode(bytes, out);
}

// ---------------------------------------------------------------------------------------
// tokenizer.json

const json& member(const json& j, const char* key, const char* where) {
  if (!j.is_object() || !j.contains(key)) fail(where, ": missing '", key, "'");
  return j.at(key);
}

std::string string_member(const json& j, const char* key, const char* where) {
  const json& v = member(j, key, where);
  if (!v.is_string()) fail(where, ": '", key, "' is not a string");
  return v.get<std::string>();
}

bool bool_member(const json& j, const char* key, bool fallback) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_boolean()) fail("tokenizer.json: '", key, "' is not a boolean");
  return j.at(key).get<bool>();
}

std::string type_of(const json& j, const char* where) {
  if (j.is_null()) return "";
  return string_member(j, "type", where);
}

// The pre-tokenizer configurations of the supported families.
PreTokenizerKind parse_pre_tokenizer(const json& pre) {
  const std::string type = type_of(pre, "tokenizer.json pre_tokenizer");
  auto byte_level_with_regex = [](const json& p) {
    return type_of(p, "pre_tokenizer") == "ByteLevel" && bool_member(p, "use_regex", true) &&
           !bool_member(p, "add_prefix_space", false);
  };
  auto byte_level_plain = [](const json& p) {
    return type_of(p, "pre_tokenizer") == "ByteLevel" && !bool_member(p, "use_regex", true) &&
           !bool_member(p, "add_prefix_space", false);
  };
  if (byte_level_with_regex(pre)) return PreTokenizerKind::kGpt2;
  if (type == "Sequence") {
    const json& list = member(pre, "pretokenizers", "pre_tokenizer");
    if (list.is_array() && list.size() == 2) {
      const json& first = list[0];
      if (type_of(first, "pre_tokenizer") == "Split" && byte_level_plain(list[1]) &&
          string_member(first, "behavior", "Split") == "Isolated" &&
          !bool_member(first, "invert", false)) {
        const json& pattern = member(first, "pattern", "Split");
        if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
          const std::string regex = pattern["Regex"].get<std::string>();
          if (regex == kQwen2Pattern) return PreTokenizerKind::kQwen2;
          if (regex == kQwen35Pattern) return PreTokenizerKind::kQwen35;
          if (regex == kLlama3Pattern) return PreTokenizerKind::kLlama3;
          fail("tokenizer.json: unsupported Split regex: ", regex);
        }
      }
      if (type_of(first, "pre_tokenizer") == "Digits" &&
          bool_member(first, "individual_digits", false) && byte_level_with_regex(list[1])) {
        return PreTokenizerKind::kDigitsThenGpt2;
      }
    }
  }
  fail("tokenizer.json: unsupported pre_tokenizer ", pre.dump().substr(0, 300));
}

// Leading / trailing special tokens of a TemplateProcessing "single" template.
void parse_post_processor(const json& post, bool* adds_bos, std::string* bos, bool* adds_eos,
                          std::string* eos) {
  const std::string type = type_of(post, "tokenizer.json post_processor");
  if (type.empty() || type == "ByteLevel") return;
  if (type == "Sequence") {
    const json& list = member(post, "processors", "post_processor");
    if (!list.is_array()) fail("tokenizer.json: post_processor processors is not a list");
    for (const json& p : list) parse_post_processor(p, adds_bos, bos, adds_eos, eos);
    return;
  }
  if (type != "TemplateProcessing") fail("tokenizer.json: unsupported post_processor ", type);
  const json& single = member(post, "single", "TemplateProcessing");
  if (!single.is_array()) fail("tokenizer.json: TemplateProcessing single is not a list");
  bool seen_sequence = false;
  for (const json& piece : single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      seen_sequence = true;
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      const std::string id = string_member(piece["SpecialToken"], "id", "SpecialToken");
      if (!seen_sequence) {
        if (*adds_bos) fail("tokenizer.json: template adds more than one leading token");
        *adds_bos = true, *bos = id;
      } else {
        if (*adds_eos) fail("tokenizer.json: template adds more than one trailing token");
        *adds_eos = true, *eos = id;
      }
    } else {
      fail("tokenizer.json: unsupported TemplateProcessing piece ", piece.dump());
    }
  }
}

// A token in tokenizer_config.json: "text", {"content": "text"} or null.
std::string config_token(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return "";
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  fail("tokenizer_config.json: '", key, "' is neither a string nor a token");
}

std::string config_chat_template(const json& config) {
  if (!config.is_object() || !config.contains("chat_template")) return "";
  const json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {  // [{"name": ..., "template": ...}]: the "default" one, else the first
    std::string first;
    for (const json& e : t) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) continue;
      if (e.value("name", "") == "default") return e["template"].get<std::string>();
      if (first.empty()) first = e["template"].get<std::string>();
    }
    return first;
  }
  if (t.is_null()) return "";
  fail("tokenizer_config.json: chat_template is neither a string nor a list");
}

// A token id from tokenizer.json, range-checked before narrowing (2^40 used to wrap to 0).
int32_t json_token_id(const json& id, const std::string& what) {
  if (!id.is_number_integer()) fail("tokenizer.json: ", what, " is not an integer");
  const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < (1u << 24)
                                                : id.get<int64_t>() >= 0 && id.get<int64_t>() < (1 << 24);
  if (!in_range) fail("tokenizer.json: ", what, " ", id.dump(), " is outside [0, 2^24)");
  return static_cast<int32_t>(id.get<int64_t>());
}

void load_json_model(ByteLevelBpeTokenizer& tok, const json& model) {
  const char* where = "tokenizer.json model";
  if (string_member(model, "type", where) != "BPE") {
    fail("tokenizer.json: unsupported model type '", model["type"].get<std::string>(), "'");
  }
  if (bool_member(model, "byte_fallback", false)) fail("tokenizer.json: byte_fallback BPE is unsupported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() &&
        !(model[key].is_string() && model[key].get<std::string>().empty())) {
      fail("tokenizer.json: BPE ", key, " is unsupported");
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    fail("tokenizer.json: BPE dropout is unsupported");
  }
  tok.ignore_merges_ = bool_member(model, "ignore_merges", false);
  const json& vocab = member(model, "vocab", where);
  if (!vocab.is_object()) fail("tokenizer.json: model.vocab is not an object");
  for (const auto& [text, id] : vocab.items()) tok.set_token(json_token_id(id, "vocab id of '" + text + "'"), text, kAttrNormal);
}

void load_json_merges(ByteLevelBpeTokenizer& tok, const json& model) {
  const json& merges = member(model, "merges", "tokenizer.json model");
  if (!merges.is_array()) fail("tokenizer.json: model.merges is not a list");
  int32_t rank = 0;
  for (const json& m : merges) {
    if (m.is_string()) {  // "left right" (Qwen2.5 and older files)
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        fail("tokenizer.json: merge ", rank, " '", s, "' is not two tokens");
      }
      tok.add_merge(std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1),
                    rank);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      tok.add_merge(m[0].get<std::string>(), m[1].get<std::string>(), rank);  // Qwen3
    } else {
      fail("tokenizer.json: merge ", rank, " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    ++rank;
  }
}

void load_json_added_tokens(ByteLevelBpeTokenizer& tok, const json& root) {
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
  const json& added = root["added_tokens"];
  if (!added.is_array()) fail("tokenizer.json: added_tokens is not a list");
  for (const json& a : added) {
    AddedToken t;
    t.id = json_token_id(member(a, "id", "tokenizer.json added token"), "added token id");
    t.content = string_member(a, "content", "tokenizer.json added token");
    t.special = bool_member(a, "special", false);
    t.lstrip = bool_member(a, "lstrip", false);
    t.rstrip = bool_member(a, "rstrip", false);
    t.single_word = bool_member(a, "single_word", false);
    t.normalized = bool_member(a, "normalized", !t.special);
    tok.set_token(t.id, t.content, t.special ? kAttrControl : kAttrUserDefined);
    if (t.normalized && tok.nfc_) t.content = unicode::nfc(t.content);
    (t.normalized ? tok.normalized_added_ : tok.raw_added_).add(t);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer_from_json(const json& root, const json& config) {
  auto tok = std::make_unique<ByteLevelBpeTokenizer>(ByteLevelBpeTokenizer::Flavor::kHuggingFace);
  if (!root.is_object()) fail("tokenizer.json: not a JSON object");
  const json& model = member(root, "model", "tokenizer.json");

  const std::string normalizer = type_of(root.value("normalizer", json()), "normalizer");
  if (normalizer == "NFC") {
    tok->nfc_ = true;
  } else if (!normalizer.empty()) {
    fail("tokenizer.json: unsupported normalizer '", normalizer, "'");
  }
  tok->pre_.kind = parse_pre_tokenizer(root.value("pre_tokenizer", json()));
  tok->pre_.fold_long_s = true;  // Oniguruma's (?i)
  const std::string decoder = type_of(root.value("decoder", json()), "decoder");
  if (!decoder.empty() && decoder != "ByteLevel") {
    fail("tokenizer.json: unsupported decoder '", decoder, "'");
  }

  load_json_model(*tok, model);
  load_json_added_tokens(*tok, root);
  tok->finish_vocab();
  load_json_merges(*tok, model);

  bool post_bos = false, post_eos = false;
  std::string post_bos_token, post_eos_token;
  parse_post_processor(root.value("post_processor", json()), &post_bos, &post_bos_token,
                       &post_eos, &post_eos_token);
  ByteLevelBpeTokenizer::Specials sp;
  sp.bos_text = config_token(config, "bos_token");
  sp.eos_text = config_token(config, "eos_token");
  if (sp.bos_text.empty()) sp.bos_text = post_bos_token;
  if (sp.eos_text.empty()) sp.eos_text = post_eos_token;
  if (!sp.bos_text.empty()) sp.bos_id = tok->token_to_id(sp.bos_text).value_or(-1);
  if (!sp.eos_text.empty()) sp.eos_id = tok->token_to_id(sp.eos_text).value_or(-1);
  // The post-processor adds BOS/EOS; transformers also honours add_bos_token.
  sp.add_bos = post_bos || bool_member(config, "add_bos_token", false);
  sp.add_eos = post_eos || bool_member(config, "add_eos_token", false);
  if (post_bos && post_bos_token != sp.bos_text) {
    fail("tokenizer.json: template BOS differs from bos_token");
  }
  if (post_eos && post_eos_token != sp.eos_text) {
    fail("tokenizer.json: template EOS differs from eos_token");
  }
  sp.chat_template = config_chat_template(config);
  tok->finish_special(sp);
  return tok;
}

// ---------------------------------------------------------------------------------------
// GGUF (tokenizer.ggml.model == "gpt2")

namespace {

struct GgufPre {
  PreTokenizerKind kind;
  bool ignore_merges = false;
  bool add_bos = false;
  bool clean_spaces = true;
};

// llama.cpp's tokenizer.ggml.pre names for the regexes implemented here.
GgufPre gguf_pre_tokenizer(const std::string& pre) {
  for (const char* name : {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"}) {
    if (pre == name) return {PreTokenizerKind::kQwen2, false, false, pre == "megrez"};
  }
  for (const char* name : {"stablelm2", "hunyuan", "solar-open", "grok-2"}) {
    if (pre == name) {
      return {PreTokenizerKind::kQwen2, false, false, pre == "stablelm2"};
    }
  }
  if (pre == "qwen35") return {PreTokenizerKind::kQwen35, false, false, false};
  for (const char* name : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                           "midm-2.0", "lfm2", "jina-v5-nano"}) {
    if (pre == name) return {PreTokenizerKind::kLlama3, true, true, true};
  }
  if (pre == "dbrx" || pre == "smaug-bpe") return {PreTokenizerKind::kLlama3, false, false, true};
  for (const char* name : {"smollm", "starcoder", "refact", "codeshell", "exaone", "minerva-7b",
                           "mellum2"}) {
    if (pre == name) return {PreTokenizerKind::kDigitsThenGpt2, false, false, pre != "smollm"};
  }
  if (pre == "command-r") return {PreTokenizerKind::kDigitsThenGpt2, false, false, false};
  for (const char* name : {"gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "mellum",
                           "a.x-4.0", "gigachat"}) {
    if (pre == name) return {PreTokenizerKind::kGpt2, false, false, true};
  }
  if (pre == "trillion" || pre == "granite-docling") {
    return {PreTokenizerKind::kGpt2, false, false, false};
  }
  fail("GGUF: unsupported pre-tokenizer '", pre.empty() ? "(none: llama.cpp 'default')" : pre,
       "'");
}

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer_from_gguf(const GgufFile& gguf) {
  auto tok = std::make_unique<ByteLevelBpeTokenizer>(ByteLevelBpeTokenizer::Flavor::kLlamaCpp);
  const GgufPre pre = gguf_pre_tokenizer(gguf.get_string("tokenizer.ggml.pre").value_or(""));
  tok->pre_.kind = pre.kind;
  tok->ignore_merges_ = pre.ignore_merges;

  const GgufStringArray& tokens = gguf_string_array(gguf, "tokenizer.ggml.tokens", true);
  const GgufNumberArray& types = gguf_number_array(gguf, "tokenizer.ggml.token_type");
  if (!types.empty() && types.size() < tokens.size()) {
    fail(gguf.path(), ": ", types.size(), " token types for ", tokens.size(), " tokens");
  }
  const GgufStringArray& merges = gguf_string_array(gguf, "tokenizer.ggml.merges", true);
  if (tokens.size() >= (1u << 24)) fail(gguf.path(), ": ", tokens.size(), " tokens is implausibly many");
  tok->reserve(tokens.size(), tokens.text_bytes(), merges.size());
  size_t i = 0;
  for (const std::string_view token : tokens) {
    const std::string empty_name = token.empty() ? "[EMPTY_" + std::to_string(i) + "]" : "";
    const std::string_view text = token.empty() ? std::string_view(empty_name) : token;
    uint8_t attr = gguf_token_attr(types, i);
    if (llama_cpp_forces_control(text)) attr |= kAttrControl;
    tok->set_token(static_cast<int32_t>(i++), text, attr);
  }
  tok->finish_vocab();
  int32_t rank = 0;
  for (const std::string_view merge : merges) {
    const size_t space = merge.find(' ', 1);  // llama.cpp: first space after position 0
    if (space != std::string_view::npos) tok->add_merge(merge.substr(0, space), merge.substr(space + 1), rank);
    ++rank;
  }

  tok->build_special_cache();
  const int32_t n = static_cast<int32_t>(tokens.size());

  // bos/eos defaults of llama.cpp's BPE vocabularies, then the metadata.
  ByteLevelBpeTokenizer::Specials sp;
  sp.bos_id = gguf_token_id(gguf, "tokenizer.ggml.bos_token_id", 11, n);
  sp.eos_id = gguf_token_id(gguf, "tokenizer.ggml.eos_token_id", 11, n);
  sp.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(pre.add_bos);
  sp.add_eos = gguf.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  sp.chat_template = gguf.get_string("tokenizer.chat_template").value_or("");
  tok->decode_options_.add_space_prefix =
      gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(false);
  tok->decode_options_.clean_spaces = pre.clean_spaces;
  tok->finish_special(sp);
  return tok;
}

}  // namespace zen
