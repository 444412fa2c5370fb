// SentencePiece-style BPE from GGUF (tokenizer.ggml.model == "llama", e.g. stories260K), with
// llama.cpp's semantics: a space prefix before text that follows BOS or a special token,
// spaces written as U+2581, merges by highest vocabulary score (leftmost on ties), and
// <0xXX> byte tokens for characters the vocabulary lacks.
#include <algorithm>
#include <queue>

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/token_index.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

namespace zen {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t m; (m = s.find(from, pos)) != std::string_view::npos; pos = m + from.size()) {
    out.append(s.substr(pos, m - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

class SpmTokenizer final : public VocabTokenizer {
 public:
  explicit SpmTokenizer(const GgufFile& gguf);

  std::vector<int32_t> encode(std::string_view text, bool parse_special, bool add_bos) const override;

 private:
  int32_t lookup(std::string_view text) const { return index_.find(text); }
  void encode_fragment(const std::string& text, std::vector<int32_t>& out) const;
  void push_bytes(std::string_view bytes, std::vector<int32_t>& out) const;

  std::vector<float> scores_;
  std::array<int32_t, 256> byte_tokens_{};
  int32_t unk_id_ = -1;
  bool add_space_prefix_ = true;
  bool add_eos_ = false;
  std::vector<std::pair<int32_t, std::string>> special_cache_, parse_always_;
};

SpmTokenizer::SpmTokenizer(const GgufFile& gguf) {
  const GgufStringArray& tokens = gguf_string_array(gguf, "tokenizer.ggml.tokens", true);
  const GgufNumberArray& scores = gguf_number_array(gguf, "tokenizer.ggml.scores");
  const GgufNumberArray& types = gguf_number_array(gguf, "tokenizer.ggml.token_type");
  const size_t n = tokens.size();
  if (n >= (1u << 24)) fail(gguf.path(), ": ", n, " tokens is implausibly many");
  if (!scores.empty() && scores.size() < n) fail(gguf.path(), ": fewer scores than tokens");
  if (!types.empty() && types.size() < n) fail(gguf.path(), ": fewer token types than tokens");
  scores_.assign(n, 0.0f);
  attrs_.assign(n, kAttrNormal);
  texts_.resize(n);
  texts_.reserve(n, tokens.text_bytes());
  token_bytes_.resize(n);
  token_bytes_.reserve(n, tokens.text_bytes());
  index_.reset(&texts_, n);
  size_t i = 0;
  for (const std::string_view token : tokens) {
    const std::string empty_name = token.empty() ? "[EMPTY_" + std::to_string(i) + "]" : "";
    texts_.set(i, token.empty() ? std::string_view(empty_name) : token);
    if (index_.insert(static_cast<int32_t>(i), /*overwrite=*/false) >= 0) {
      fail(gguf.path(), ": duplicate token '", texts_[i], "'");
    }
    if (!scores.empty()) scores_[i] = static_cast<float>(scores[i]);
    attrs_[i] = gguf_token_attr(types, i);
    const std::string_view t = texts_[i];  // valid until texts_ changes again
    if (llama_cpp_forces_control(t)) attrs_[i] |= kAttrControl;
    const uint8_t attr = attrs_[i];
    if (attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) {
      token_bytes_.set(i, t);
    } else if (attr & kAttrNormal) {
      token_bytes_.set(i, replace_all(t, kSpaceMark, " "));
    } else if (attr & kAttrByte) {
      if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>' || hex_value(t[3]) < 0 ||
          hex_value(t[4]) < 0) {
        fail(gguf.path(), ": byte token ", i, " is '", t, "', not <0xXX>");
      }
      token_bytes_.set(i, std::string(1, static_cast<char>(hex_value(t[3]) * 16 + hex_value(t[4]))));
    }
    ++i;
  }
  texts_.shrink_to_fit();
  token_bytes_.shrink_to_fit();
  // Byte fallback: <0xXX>, else the byte itself as a token (llama.cpp's byte_to_token).
  for (int b = 0; b < 256; ++b) {
    static const char* kHex = "0123456789ABCDEF";
    const char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
    byte_tokens_[b] = lookup(name);
    if (byte_tokens_[b] < 0) byte_tokens_[b] = lookup(std::string(1, static_cast<char>(b)));
  }
  // Special-token cache, as for BPE vocabularies.
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (attrs_[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) ids.push_back(id);
  }
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return texts_[a].size() > texts_[b].size(); });
  for (int32_t id : ids) {
    special_cache_.emplace_back(id, texts_[id]);
    if (!(attrs_[id] & (kAttrControl | kAttrUnknown))) parse_always_.emplace_back(id, texts_[id]);
  }

  const int32_t count = vocab_size();
  bos_id_ = gguf_token_id(gguf, "tokenizer.ggml.bos_token_id", 1, count);
  eos_id_ = gguf_token_id(gguf, "tokenizer.ggml.eos_token_id", 2, count);
  unk_id_ = gguf_token_id(gguf, "tokenizer.ggml.unknown_token_id", 0, count);
  add_bos_ = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  add_eos_ = gguf.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  add_space_prefix_ = gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  if (add_bos_ && bos_id_ < 0) fail(gguf.path(), ": adds a BOS token but has none");
  if (add_eos_ && eos_id_ < 0) fail(gguf.path(), ": adds an EOS token but has none");
  chat_template_ = gguf.get_string("tokenizer.chat_template").value_or("");
  if (bos_id_ >= 0) bos_token_ = texts_[bos_id_];
  if (eos_id_ >= 0) eos_token_ = texts_[eos_id_];
  if (eos_id_ >= 0) stop_ids_.push_back(eos_id_);
  for (int32_t id = 0; id < count; ++id) {
    if (id != eos_id_ && is_stop_token_name(texts_[id])) stop_ids_.push_back(id);
  }
  decode_options_ = {add_space_prefix_, add_bos_, add_eos_, bos_id_, eos_id_, false};
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool parse_special, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && add_bos_) out.push_back(bos_id_);
  std::vector<Fragment> fragments;
  partition_longest_first(text, parse_special ? special_cache_ : parse_always_, fragments);
  bool after_special = true;  // the text start counts as following a special token
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    std::string piece = add_space_prefix_ && after_special ? " " : "";
    piece.append(text.substr(f.begin, f.end - f.begin));
    encode_fragment(replace_all(piece, " ", kSpaceMark), out);
    after_special = false;
  }
  if (add_eos_) out.push_back(eos_id_);
  return out;
}

void SpmTokenizer::push_bytes(std::string_view bytes, std::vector<int32_t>& out) const {
  for (char b : bytes) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(b)];
    if (id >= 0) {
      out.push_back(id);
    } else if (unk_id_ >= 0) {
      out.push_back(unk_id_);  // llama.cpp would throw; unknown is the graceful reading
    }
  }
}

void SpmTokenizer::encode_fragment(const std::string& text, std::vector<int32_t>& out) const {
  struct Symbol {
    size_t offset, n;  // bytes of text; n == 0 once merged into the left neighbour
    int prev, next;
  };
  struct Bigram {
    float score;
    int left, right;
    size_t size;
    bool operator<(const Bigram& o) const {  // max-heap: highest score, then leftmost
      return score < o.score || (score == o.score && left > o.left);
    }
  };
  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(unicode::utf8_sequence_length(static_cast<uint8_t>(text[offset])),
                                text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({offset, len, index - 1, offset + len == text.size() ? -1 : index + 1});
    offset += len;
  }
  std::priority_queue<Bigram> queue;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].n + symbols[right].n;
    const int32_t id = lookup(std::string_view(text).substr(symbols[left].offset, size));
    if (id >= 0) queue.push({scores_[id], left, right, size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;  // stale
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  // Merges only ever form vocabulary tokens, so a symbol that is not one is a single
  // character the vocabulary lacks: byte fallback.
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view s = std::string_view(text).substr(symbols[i].offset, symbols[i].n);
    const int32_t id = lookup(s);
    if (id >= 0) {
      out.push_back(id);
    } else {
      push_bytes(s, out);
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer_from_gguf(const GgufFile& gguf) {
  return std::make_unique<SpmTokenizer>(gguf);
}

}  // namespace zen
