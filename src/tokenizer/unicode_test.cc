// Unicode helpers and pre-tokenizers against Python references (fixtures written by
// tools/make_tokenizer_fixtures.py: unicodedata's NFC, HF `tokenizers` pre-tokenizers).
#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/mmap.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace zen {
namespace {

using json = nlohmann::json;

json read_fixture(const std::string& name) {
  return json::parse(read_text_file(std::string(ZEN_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name));
}

TEST(TokenizerUnicodeTest, NfcMatchesPython) {
  const json corpus = read_fixture("corpus.json");
  const auto& inputs = corpus["nfc_inputs"];
  ASSERT_EQ(inputs.size(), corpus["nfc"].size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string in = inputs[i].get<std::string>();
    EXPECT_EQ(unicode::nfc(in), corpus["nfc"][i].get<std::string>()) << json(in).dump();
  }
}

TEST(TokenizerUnicodeTest, NfcCases) {
  EXPECT_EQ(unicode::nfc("e\xCC\x81"), "\xC3\xA9");                 // e + U+0301 -> é
  EXPECT_EQ(unicode::nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // L + V -> 가
  EXPECT_EQ(unicode::nfc("\xE2\x84\xAB"), "\xC3\x85");               // Angstrom sign -> Å
  EXPECT_EQ(unicode::nfc("abc"), "abc");
  EXPECT_EQ(unicode::nfc("a\xFF\xCC\x81"), "a\xFF\xCC\x81");          // ill-formed byte blocks
  EXPECT_TRUE(unicode::is_nfc_quick("\xE4\xBD\xA0\xE5\xA5\xBD"));      // 你好
  EXPECT_FALSE(unicode::is_nfc_quick("e\xCC\x81"));
}

TEST(TokenizerUnicodeTest, DecodeRejectsIllFormedSequences) {
  using unicode::decode_utf8;
  EXPECT_EQ(decode_utf8("\xF0\x9F\x8D\x95", 0).cp, 0x1F355u);
  EXPECT_EQ(decode_utf8("\xF0\x9F\x8D\x95", 0).len, 4u);
  EXPECT_TRUE(unicode::is_invalid(decode_utf8("\xC0\xAF", 0).cp));      // overlong
  EXPECT_EQ(decode_utf8("\xC0\xAF", 0).len, 1u);
  EXPECT_TRUE(unicode::is_invalid(decode_utf8("\xED\xA0\x80", 0).cp));  // surrogate
  EXPECT_EQ(decode_utf8("\xED\xA0\x80", 0).len, 1u);
  EXPECT_TRUE(unicode::is_invalid(decode_utf8("\xF4\x90\x80\x80", 0).cp));  // > U+10FFFF
  EXPECT_EQ(decode_utf8("\xE2\x82x", 0).len, 2u);  // maximal subpart
  EXPECT_EQ(unicode::sanitize_utf8("a\xE2\x82x\xFF"), "a\xEF\xBF\xBDx\xEF\xBF\xBD");
  EXPECT_EQ(unicode::sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerUnicodeTest, CompletePrefixStopsBeforeUnfinishedCharacters) {
  EXPECT_EQ(unicode::complete_utf8_prefix("ab"), 2u);
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xF0\x9F\x8D"), 2u);
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xF0\x9F\x8D\x95"), 6u);
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xE2"), 2u);
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xFF"), 3u);      // never completes: release it
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xE2x"), 4u);
  EXPECT_EQ(unicode::complete_utf8_prefix("\xC3"), 0u);
}

TEST(TokenizerUnicodeTest, CharacterClasses) {
  using unicode::char_flags;
  EXPECT_EQ(char_flags('a'), unicode::kLetter);
  EXPECT_EQ(char_flags('7'), unicode::kNumber);
  EXPECT_EQ(char_flags(0x4F60), unicode::kLetter);                    // 你
  EXPECT_EQ(char_flags(0x0663), unicode::kNumber);                    // Arabic-Indic 3
  EXPECT_EQ(char_flags(0x3000), unicode::kWhitespace);                // ideographic space
  EXPECT_EQ(char_flags(0x200B), 0);                                   // zero width space: Cf
  EXPECT_EQ(char_flags(0x1F355), 0);                                  // emoji: So
  EXPECT_EQ(char_flags(0x20000), unicode::kLetter);                   // CJK ext. B
  EXPECT_TRUE(char_flags(0x0301) & unicode::kMark);
  EXPECT_TRUE(char_flags(0x0301) & unicode::kNfcCheck);
}

TEST(TokenizerUnicodeTest, AlphabetRoundTrips) {
  for (int b = 0; b < 256; ++b) EXPECT_EQ(byte_from_char(byte_to_char(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(byte_to_char(' '), 0x120u);  // Ġ
  EXPECT_EQ(byte_to_char('\n'), 0x10Au);  // Ċ
  std::string bytes;
  EXPECT_TRUE(byte_level_to_bytes(bytes_to_byte_level("a \xFF\n"), bytes));
  EXPECT_EQ(bytes, "a \xFF\n");
  EXPECT_FALSE(byte_level_to_bytes("\xE4\xBD\xA0", bytes));  // 你 is not in the alphabet
}

struct PreCase {
  const char* fixture_key;
  PreTokenizerKind kind;
};

class PreTokenizerTest : public ::testing::TestWithParam<PreCase> {};

TEST_P(PreTokenizerTest, MatchesHuggingFace) {
  const json corpus = read_fixture("corpus.json");
  const json expected = read_fixture("pretokenizers.json")[GetParam().fixture_key];
  PreTokenizer pre{GetParam().kind, /*fold_long_s=*/true};
  for (size_t i = 0; i < corpus["texts"].size(); ++i) {
    const std::string text = corpus["texts"][i].get<std::string>();
    std::vector<PreTokenizer::Piece> pieces;
    pre.split(text, pieces);
    std::vector<std::string> got;
    for (const auto& p : pieces) got.push_back(text.substr(p.begin, p.end - p.begin));
    EXPECT_EQ(got, expected[i].get<std::vector<std::string>>()) << json(text).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, PreTokenizerTest,
                         ::testing::Values(PreCase{"qwen2", PreTokenizerKind::kQwen2},
                                           PreCase{"qwen35", PreTokenizerKind::kQwen35},
                                           PreCase{"llama3", PreTokenizerKind::kLlama3},
                                           PreCase{"gpt2", PreTokenizerKind::kGpt2},
                                           PreCase{"digits_gpt2", PreTokenizerKind::kDigitsThenGpt2}),
                         [](const auto& info) { return std::string(info.param.fixture_key); });

TEST(TokenizerUnicodeTest, LongSIsFoldedOnlyForOniguruma) {
  const std::string text = "I'\xC5\xBFt";  // I'ſt
  std::vector<PreTokenizer::Piece> hf, llama;
  PreTokenizer{PreTokenizerKind::kQwen2, true}.split(text, hf);
  PreTokenizer{PreTokenizerKind::kQwen2, false}.split(text, llama);
  ASSERT_EQ(hf.size(), 3u);     // I | 'ſ | t
  ASSERT_EQ(llama.size(), 2u);  // I | 'ſt
}

}  // namespace
}  // namespace zen
