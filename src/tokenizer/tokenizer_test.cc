// Tokenizers against their references: HF `tokenizers` for tokenizer.json files, llama.cpp
// for GGUF vocabularies. Expected ids come from tools/make_tokenizer_fixtures.py; the
// tokenizer files are read where they live and the tests skip when they are absent.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/mmap.h"
#include "io/gguf.h"
#include "io/io_test_writers.h"
#include "tokenizer/unicode.h"

namespace zen {
namespace {

using json = nlohmann::json;

std::string shared_data() { return std::string(ZEN_SOURCE_DIR) + "/../shared/data"; }

std::string default_model_path() {
  if (const char* env = std::getenv("ZEN_DEFAULT_MODEL"); env != nullptr && *env) return env;
  return std::string(ZEN_SOURCE_DIR) + "/models/default/model.gguf";
}

json read_fixture(const std::string& name) {
  const std::string path = std::string(ZEN_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
  return json::parse(read_text_file(path));
}

const json& corpus() {
  static const json c = read_fixture("corpus.json");
  return c;
}

struct VocabCase {
  std::string name;      // fixture file stem
  std::string path;      // tokenizer file or folder
  bool hugging_face;     // tokenizer.json (HF reference) or GGUF (llama.cpp reference)
};

std::ostream& operator<<(std::ostream& os, const VocabCase& c) { return os << c.name; }

std::vector<VocabCase> vocab_cases() {
  return {
      {"qwen3", shared_data() + "/tokenizers/qwen3", true},
      {"qwen2_5", shared_data() + "/tokenizers/qwen2_5/tokenizer.json", true},
      {"stories260k", shared_data() + "/stories260K/stories260K.gguf", false},
      {"default", default_model_path(), false},
      {"smollm2", ZEN_SOURCE_DIR "/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", false},
  };
}

// Loaded once per process: the Qwen vocabularies take a moment to parse.
const Tokenizer* load_cached(const VocabCase& c) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(c.name);
  if (it == cache.end()) it = cache.emplace(c.name, Tokenizer::load(c.path)).first;
  return it->second.get();
}

std::string show(const std::string& text) {
  std::ostringstream os;
  os << json(text).dump();
  return os.str();
}

class VocabTest : public ::testing::TestWithParam<VocabCase> {
 protected:
  void SetUp() override {
    if (!file_exists(GetParam().path) && !is_directory(GetParam().path)) {
      GTEST_SKIP() << GetParam().path << " not found (set ZEN_DEFAULT_MODEL for the default model)";
    }
    tok_ = load_cached(GetParam());
    fixture_ = read_fixture(GetParam().name + ".json");
  }
  size_t count() const { return corpus()["texts"].size(); }
  std::string text(size_t i) const { return corpus()["texts"][i].get<std::string>(); }
  std::vector<int32_t> ids(size_t i) const { return fixture_["ids"][i].get<std::vector<int32_t>>(); }

  const Tokenizer* tok_ = nullptr;
  json fixture_;
};

TEST_P(VocabTest, EncodesLikeReference) {
  for (size_t i = 0; i < count(); ++i) {
    EXPECT_EQ(tok_->encode(text(i), true), ids(i)) << "text " << i << ": " << show(text(i));
  }
}

TEST_P(VocabTest, EncodesWithoutSpecialParsingLikeReference) {
  for (size_t i = 0; i < count(); ++i) {
    EXPECT_EQ(tok_->encode(text(i), false), fixture_["ids_plain"][i].get<std::vector<int32_t>>())
        << "text " << i << ": " << show(text(i));
  }
}

TEST_P(VocabTest, DecodesLikeReference) {
  for (size_t i = 0; i < count(); ++i) {
    EXPECT_EQ(tok_->decode(ids(i), false), fixture_["decoded"][i].get<std::string>())
        << "text " << i << ": " << show(text(i));
    EXPECT_EQ(tok_->decode(ids(i), true), fixture_["decoded_skip"][i].get<std::string>())
        << "text " << i << ": " << show(text(i));
  }
}

TEST_P(VocabTest, DecodeOfEncodeGivesTheText) {
  for (size_t i = 0; i < count(); ++i) {
    std::vector<int32_t> encoded = tok_->encode(text(i), true);
    std::string expected = text(i);
    if (GetParam().hugging_face) {
      expected = corpus()["nfc"][i].get<std::string>();  // the Qwen normalizer is NFC
    } else if (tok_->add_bos()) {
      // SentencePiece: without the BOS, llama.cpp strips the space prefix it added. Texts
      // with special tokens get extra prefixes after them, so they do not round-trip.
      ASSERT_EQ(encoded.front(), tok_->bos_id());
      encoded.erase(encoded.begin());
      bool has_special = false;
      for (int32_t id : encoded) has_special |= tok_->is_special(id);
      if (has_special) continue;
    }
    EXPECT_EQ(tok_->decode(encoded, false), expected) << "text " << i << ": " << show(text(i));
  }
}

TEST_P(VocabTest, StreamingDetokenizerIsByteExactOneTokenAtATime) {
  for (size_t i = 0; i < count(); ++i) {
    StreamingDetokenizer detok(*tok_);
    std::string streamed, concatenated;
    for (int32_t id : ids(i)) {
      streamed += detok.push(id);
      concatenated += tok_->token_bytes(id);
    }
    streamed += detok.flush();
    EXPECT_EQ(streamed, concatenated) << "text " << i << ": " << show(text(i));
    if (!GetParam().hugging_face && tok_->add_bos()) continue;  // SPM strips its prefix in decode
    EXPECT_EQ(streamed, tok_->decode(ids(i), false)) << "text " << i << ": " << show(text(i));
  }
}

TEST_P(VocabTest, StreamedPiecesAreCompleteCharacters) {
  // Emoji and CJK are split across byte tokens; each push must end on a character boundary.
  for (size_t i = 0; i < count(); ++i) {
    StreamingDetokenizer detok(*tok_);
    for (int32_t id : ids(i)) {
      const std::string part = detok.push(id);
      std::string copy = part;
      // A valid UTF-8 string survives a round trip through nlohmann's strict dump.
      EXPECT_NO_THROW((void)json(copy).dump()) << "text " << i << " gave a partial character";
    }
  }
}

TEST_P(VocabTest, SpecialTokensAndStopIds) {
  const Tokenizer& t = *tok_;
  ASSERT_GE(t.eos_id(), 0);
  ASSERT_FALSE(t.stop_ids().empty());
  EXPECT_EQ(t.stop_ids().front(), t.eos_id());
  EXPECT_EQ(t.token_to_id(t.eos_token()), t.eos_id());
  if (const auto im_end = t.token_to_id("<|im_end|>"); im_end.has_value()) {
    EXPECT_NE(std::find(t.stop_ids().begin(), t.stop_ids().end(), *im_end), t.stop_ids().end());
    EXPECT_TRUE(t.is_special(*im_end));
  }
  if (GetParam().name != "stories260k") {
    EXPECT_FALSE(t.chat_template().empty());
  }
  EXPECT_EQ(t.token_bytes(-1), "");
  EXPECT_EQ(t.token_bytes(t.vocab_size()), "");
}

TEST_P(VocabTest, ArbitraryBytesAndIdsNeverBreakIt) {
  // Random byte strings (ill-formed UTF-8 included) built from pieces that exercise the
  // pre-tokenizer and special-token paths; random ids, out-of-range ones included.
  static const char* const kPieces[] = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "7", "'s", "'S",
                                        "\xC3\xA9", "e\xCC\x81", "\xE4\xBD\xA0", "\xF0\x9F\x8D\x95",
                                        "\xE2\x80\x8D", "<|im_end|>", "<s>", "<think>", "!",
                                        "\xFF", "\xC3", "\xE2\x82", "\x80", "\xED\xA0\x80"};
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int n = static_cast<int>(next() % 40);
    for (int i = 0; i < n; ++i) {
        if (next() % 4 == 0) {
        text.push_back(static_cast<char>(next() & 0xFF));  // NUL included
      } else {
        text += kPieces[next() % std::size(kPieces)];
      }
    }
    const std::vector<int32_t> ids = tok_->encode(text, round % 2 == 0);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok_->vocab_size()) << id;
    const std::string decoded = tok_->decode(ids, false);
    // Byte-level BPE is lossless (SmolLM2 lacks tokens for bytes that never occur in UTF-8).
    const bool valid = unicode::sanitize_utf8(text) == text;
    if (GetParam().name == "default" || (GetParam().name == "smollm2" && valid)) {
      EXPECT_EQ(decoded, text) << json(unicode::sanitize_utf8(text)).dump();
    }
    std::vector<int32_t> random_ids;
    for (int i = 0; i < 20; ++i) {
      random_ids.push_back(static_cast<int32_t>(next() % (tok_->vocab_size() + 10)) - 5);
    }
    (void)tok_->decode(random_ids, round % 2 == 0);
    StreamingDetokenizer detok(*tok_);
    std::string streamed;
    for (int32_t id : random_ids) streamed += detok.push(id);
    streamed += detok.flush();
    EXPECT_NO_THROW((void)json(streamed).dump());  // always valid UTF-8
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, VocabTest, ::testing::ValuesIn(vocab_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(TokenizerTest, QwenSettingsFromTokenizerConfig) {
  const std::string path = shared_data() + "/tokenizers/qwen3";
  if (!is_directory(path)) GTEST_SKIP() << path << " not found";
  const Tokenizer* t = load_cached({"qwen3", path, true});
  EXPECT_FALSE(t->add_bos());
  EXPECT_EQ(t->bos_id(), -1);
  EXPECT_EQ(t->eos_token(), "<|im_end|>");
  EXPECT_EQ(t->eos_id(), 151645);
  EXPECT_EQ(t->stop_ids(), (std::vector<int32_t>{151645, 151643}));
  EXPECT_EQ(t->vocab_size(), 151669);
  EXPECT_NE(t->chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_TRUE(t->is_special(151644));         // <|im_start|>
  EXPECT_FALSE(t->is_special(151667));        // <think> is added but not special
  EXPECT_EQ(t->decode({151667, 9707}, true), "<think>Hello");
}

// ---------------------------------------------------------------------------------------
// Small vocabularies built in the test: run everywhere, no files needed.

// A byte-level vocabulary: the 256 byte characters, then the merges' results.
json tiny_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  uint32_t next_unprintable = 256;  // GPT-2's bytes_to_unicode
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next_unprintable++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[s] = b;
  }
  json merge_list = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(json::array({a, b}));
  }
  return {
      {"version", "1.0"},
      {"added_tokens",
       json::array({{{"id", id}, {"content", "<|end|>"}, {"special", true}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"single_word", false}},
                    {{"id", id + 1}, {"content", "<x>"}, {"special", false}, {"lstrip", true},
                     {"rstrip", true}, {"normalized", false}, {"single_word", false}}})},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"},
                       {"pattern",
                        {{"Regex",
                          "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                          "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
  };
}

TEST(TokenizerTest, TinyByteLevelBpeMergesByRank) {
  // "Ġ" is the byte-level spelling of a space.
  const json j = tiny_tokenizer_json({{"h", "e"}, {"Ġ", "t"}, {"Ġt", "he"}, {"l", "l"}, {"ll", "o"}});
  const auto tok = Tokenizer::from_tokenizer_json(j.dump(), R"({"eos_token": "<|end|>"})");
  const auto id = [&](const std::string& s) { return *tok->token_to_id(s); };
  EXPECT_EQ(tok->encode(" the"), (std::vector<int32_t>{id("Ġthe")}));
  EXPECT_EQ(tok->encode("hello"), (std::vector<int32_t>{id("he"), id("llo")}));
  EXPECT_EQ(tok->encode("x<|end|>y"), (std::vector<int32_t>{'x', id("<|end|>"), 'y'}));
  EXPECT_EQ(tok->encode("x<|end|>y", false).size(), 9u);
  // <x> strips the spaces around it (lstrip/rstrip), even without special parsing.
  EXPECT_EQ(tok->encode("a  <x>  b", false), (std::vector<int32_t>{'a', id("<x>"), 'b'}));
  // NFC: "e" + combining acute is encoded as the precomposed é (bytes C3 A9).
  EXPECT_EQ(tok->encode("e\xCC\x81"), (std::vector<int32_t>{0xC3, 0xA9}));
  EXPECT_EQ(tok->decode(tok->encode("hello <|end|>")), "hello <|end|>");
  EXPECT_EQ(tok->decode(tok->encode("hello <|end|>"), true), "hello ");
  EXPECT_EQ(tok->stop_ids(), (std::vector<int32_t>{id("<|end|>")}));
}

TEST(TokenizerTest, InvalidUtf8IsEncodedLosslessly) {
  const json j = tiny_tokenizer_json({{"h", "e"}});
  const auto tok = Tokenizer::from_tokenizer_json(j.dump());
  const std::string bad = "he\xFF\xC3 x\xE2\x82";
  EXPECT_EQ(tok->decode(tok->encode(bad)), bad);
  StreamingDetokenizer detok(*tok);
  std::string out;
  for (int32_t id : tok->encode(bad)) out += detok.push(id);
  out += detok.flush();
  EXPECT_EQ(out, "he\xEF\xBF\xBD\xEF\xBF\xBD x\xEF\xBF\xBD");  // U+FFFD for each bad part
}

TEST(TokenizerTest, StreamingHoldsIncompleteCharacters) {
  const json j = tiny_tokenizer_json({});
  const auto tok = Tokenizer::from_tokenizer_json(j.dump());
  StreamingDetokenizer detok(*tok);
  // U+1F355 (pizza) is F0 9F 8D 95: one byte token each.
  EXPECT_EQ(detok.push(0xF0), "");
  EXPECT_EQ(detok.push(0x9F), "");
  EXPECT_EQ(detok.push(0x8D), "");
  EXPECT_EQ(detok.push(0x95), "\xF0\x9F\x8D\x95");
  EXPECT_EQ(detok.push('a'), "a");
  EXPECT_EQ(detok.push(0xE2), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");
}

TEST(TokenizerTest, MalformedTokenizerJsonIsAnError) {
  const json good = tiny_tokenizer_json({{"h", "e"}});
  EXPECT_NO_THROW(Tokenizer::from_tokenizer_json(good.dump()));
  EXPECT_THROW(Tokenizer::from_tokenizer_json("{not json"), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json("[]"), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json("{}"), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(good.dump(), "{bad"), Error);

  auto broken = [&](auto&& edit) {
    json j = good;
    edit(j);
    return j.dump();
  };
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["model"]["type"] = "WordPiece"; })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["model"]["vocab"]["h"] = "x"; })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["model"]["vocab"]["h"] = -5; })), Error);
  // Ids past int32 used to wrap (2^40 became token 0).
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["model"]["vocab"]["h"] = int64_t{1} << 40; })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["model"]["vocab"]["h"] = uint64_t{1} << 63; })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["added_tokens"][0]["id"] = int64_t{1} << 40; })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["model"]["merges"] = 3; })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) {
                 j["model"]["merges"].push_back(json::array({"q", "zz"}));
               })),
               Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["model"]["merges"].push_back("a b c"); })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["model"]["merges"].push_back(7); })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) {
                 j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
               })),
               Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["added_tokens"][0]["id"] = "7"; })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(broken([](json& j) { j["added_tokens"][0].erase("content"); })), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(good.dump(), R"({"chat_template": 5})"), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(good.dump(), R"({"add_bos_token": true, "bos_token": "<nope>"})"),
               Error);

  // Every prefix of a real tokenizer.json is an error, never a crash.
  const std::string real = shared_data() + "/tokenizers/qwen2_5/tokenizer.json";
  if (file_exists(real)) {
    const std::string text = read_text_file(real);
    for (size_t cut : {size_t{0}, size_t{1}, size_t{100}, size_t{5000}, text.size() / 2, text.size() - 2}) {
      EXPECT_THROW(Tokenizer::from_tokenizer_json(text.substr(0, cut)), Error) << "cut at " << cut;
    }
  }
  EXPECT_THROW(Tokenizer::load("/nonexistent/tokenizer.json"), Error);
  EXPECT_THROW(Tokenizer::load(std::string(ZEN_SOURCE_DIR) + "/src"), Error);  // no tokenizer.json
}

// A SentencePiece vocabulary in a GGUF written by the test.
std::string tiny_spm_gguf(bool with_bytes, uint32_t bos_id = 1) {
  testing_io::GgufBuilder b;
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a",
                                     "ab", "\xE2\x96\x81" "ab"};
  std::vector<float> scores = {0, 0, 0, -1, -2, -3, -1.5f, -1, -0.5f};
  std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 1};
  if (with_bytes) {
    for (int byte = 0; byte < 256; ++byte) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", byte);
      tokens.push_back(name);
      scores.push_back(0);
      types.push_back(6);
    }
  }
  b.add_string("general.architecture", "llama");
  b.add_string("tokenizer.ggml.model", "llama");
  b.add_strings("tokenizer.ggml.tokens", tokens);
  b.key("tokenizer.ggml.scores", testing_io::kArray);
  testing_io::put_u32(b.kv, testing_io::kF32);
  testing_io::put_u64(b.kv, scores.size());
  for (float s : scores) testing_io::put_le(b.kv, s);
  b.add_i32s("tokenizer.ggml.token_type", types);
  b.add_u32("tokenizer.ggml.bos_token_id", bos_id);
  b.add_u32("tokenizer.ggml.eos_token_id", 2);
  return b.build();
}

// A BOS id outside the vocabulary is a broken file, refused by name; 0xFFFFFFFF means none.
TEST(TokenizerTest, GgufSpecialIdsOutsideTheVocabularyAreRefused) {
  const std::string path = testing_io::temp_path("spm_bad_bos.gguf");
  testing_io::write_file(path, tiny_spm_gguf(true, 5000));
  try {
    Tokenizer::load(path);
    ADD_FAILURE() << "BOS 5000 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.bos_token_id = 5000"), std::string::npos) << e.what();
  }
  testing_io::write_file(path, tiny_spm_gguf(true, 0xFFFFFFFFu));
  EXPECT_EQ(Tokenizer::load(path)->bos_id(), 1);  // none given: SentencePiece's default <s>
}

TEST(TokenizerTest, TinySentencePieceGguf) {
  const std::string path = testing_io::temp_path("spm.gguf");
  testing_io::write_file(path, tiny_spm_gguf(true));
  const auto tok = Tokenizer::load(path);
  EXPECT_TRUE(tok->add_bos());
  // " ab" is ▁ab (score -0.5 beats ▁a + b); "b a" falls back to bytes for nothing: all known.
  EXPECT_EQ(tok->encode("ab"), (std::vector<int32_t>{1, 8}));
  EXPECT_EQ(tok->encode("ab a"), (std::vector<int32_t>{1, 8, 6}));
  // "c" is not in the vocabulary: byte fallback <0x63> (id 9 + 0x63).
  EXPECT_EQ(tok->encode("ac"), (std::vector<int32_t>{1, 6, 9 + 0x63}));
  EXPECT_EQ(tok->decode({1, 8, 6}, true), " ab a");   // llama.cpp keeps the space after BOS
  EXPECT_EQ(tok->decode({8, 6}, true), "ab a");
  EXPECT_EQ(tok->decode({1, 8, 6}, false), "<s> ab a");
  EXPECT_EQ(tok->encode("</s>a"), (std::vector<int32_t>{1, 2, 6}));
  EXPECT_EQ(tok->encode("</s>a", false), (std::vector<int32_t>{1, 3, 9 + '<', 9 + '/', 9 + 's', 9 + '>', 4}));
  std::remove(path.c_str());
}

// A byte-level BPE vocabulary in a GGUF: the 256 byte characters, "ab", "abc", a BOS.
std::string tiny_bpe_gguf(const std::string& pre) {
  std::vector<std::string> tokens;
  uint32_t next_unprintable = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next_unprintable++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    tokens.push_back(s);
  }
  tokens.insert(tokens.end(), {"ab", "abc", "<|begin_of_text|>"});
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  testing_io::GgufBuilder b;
  b.add_string("tokenizer.ggml.model", "gpt2");
  b.add_string("tokenizer.ggml.pre", pre);
  b.add_strings("tokenizer.ggml.tokens", tokens);
  b.add_i32s("tokenizer.ggml.token_type", types);
  b.add_strings("tokenizer.ggml.merges", {"a b"});
  b.add_u32("tokenizer.ggml.bos_token_id", 258);
  b.add_u32("tokenizer.ggml.eos_token_id", 258);
  return b.build();
}

TEST(TokenizerTest, GgufPreTokenizerNamesSelectTheirRules) {
  const std::string path = testing_io::temp_path("bpe.gguf");
  testing_io::write_file(path, tiny_bpe_gguf("qwen2"));
  auto qwen = Tokenizer::load(path);
  EXPECT_FALSE(qwen->add_bos());
  EXPECT_EQ(qwen->encode("abc"), (std::vector<int32_t>{256, 'c'}));  // merges only: ab + c
  EXPECT_EQ(qwen->encode("1234"), (std::vector<int32_t>{'1', '2', '3', '4'}));
  // Llama 3: words found whole in the vocabulary skip the merges; BOS is added by default.
  testing_io::write_file(path, tiny_bpe_gguf("llama-bpe"));
  auto llama = Tokenizer::load(path);
  EXPECT_TRUE(llama->add_bos());
  EXPECT_EQ(llama->encode("abc"), (std::vector<int32_t>{258, 257}));
  EXPECT_EQ(llama->encode("<|begin_of_text|>ab"), (std::vector<int32_t>{258, 258, 256}));
  EXPECT_EQ(llama->decode({258, 256, 'c'}, true), "abc");
  std::remove(path.c_str());
}

TEST(TokenizerTest, MalformedGgufVocabularyIsAnError) {
  const std::string path = testing_io::temp_path("bad.gguf");
  {
    testing_io::GgufBuilder b;
    b.add_string("general.architecture", "llama");
    testing_io::write_file(path, b.build());
    EXPECT_THROW(Tokenizer::load(path), Error);  // no tokenizer at all
  }
  {
    testing_io::GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "bert");
    testing_io::write_file(path, b.build());
    EXPECT_THROW(Tokenizer::load(path), Error);
  }
  {
    testing_io::GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "gpt2");
    b.add_string("tokenizer.ggml.pre", "qwen2");
    b.add_strings("tokenizer.ggml.tokens", {"a", "b"});
    testing_io::write_file(path, b.build());
    EXPECT_THROW(Tokenizer::load(path), Error);  // no merges
  }
  {
    testing_io::GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "gpt2");
    b.add_string("tokenizer.ggml.pre", "unknown-pre");
    b.add_strings("tokenizer.ggml.tokens", {"a", "b"});
    b.add_strings("tokenizer.ggml.merges", {"a b"});
    testing_io::write_file(path, b.build());
    EXPECT_THROW(Tokenizer::load(path), Error);
  }
  {
    testing_io::GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama");
    b.add_strings("tokenizer.ggml.tokens", {"a", "a"});
    testing_io::write_file(path, b.build());
    EXPECT_THROW(Tokenizer::load(path), Error);  // duplicate token
  }
  {
    testing_io::GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama");
    b.add_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<0xZZ>"});
    b.add_i32s("tokenizer.ggml.token_type", {2, 3, 3, 6});
    testing_io::write_file(path, b.build());
    EXPECT_THROW(Tokenizer::load(path), Error);  // byte token that is not <0xXX>
  }
  {
    testing_io::GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama");
    b.add_u32("tokenizer.ggml.tokens", 5);
    testing_io::write_file(path, b.build());
    EXPECT_THROW(Tokenizer::load(path), Error);  // tokens of the wrong type
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace zen
