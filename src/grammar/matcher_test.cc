#include "grammar/matcher.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "base/error.h"
#include "base/mmap.h"
#include "grammar/compile.h"

#include <nlohmann/json.hpp>

namespace zen::grammar {
namespace {

// A small JSON-like grammar: recursion, nullable calls (ws), loops, alternatives that share
// prefixes, and a rule that ends inside tokens.
std::shared_ptr<const Grammar> toy_json() {
  GrammarBuilder b;
  const int32_t value = b.add_rule("value"), ws = b.add_rule("ws"), str = b.add_rule("string"),
                num = b.add_rule("number"), obj = b.add_rule("object"), arr = b.add_rule("array");
  b.set_body(ws, b.repeat(b.bytes(ByteSet::of(' ')), 0, 2));
  b.set_body(str, b.seq({b.literal("\""), b.star(b.alt({b.bytes(ByteSet::range('a', 'c')), b.literal("\\\"")})), b.literal("\"")}));
  b.set_body(num, b.seq({b.opt(b.literal("-")), b.plus(b.bytes(ByteSet::range('0', '2')))}));
  const ExprId member = b.seq({b.ref(str), b.ref(ws), b.literal(":"), b.ref(ws), b.ref(value)});
  b.set_body(obj, b.seq({b.literal("{"), b.ref(ws), b.opt(b.seq({member, b.star(b.seq({b.literal(","), b.ref(ws), member}))})), b.literal("}")}));
  b.set_body(arr, b.seq({b.literal("["), b.opt(b.seq({b.ref(value), b.star(b.seq({b.literal(","), b.ref(value)}))})), b.literal("]")}));
  b.set_body(value, b.alt({b.ref(str), b.ref(num), b.ref(obj), b.ref(arr), b.literal("true"), b.literal("tru")}));
  const int32_t root = b.add_rule("root");
  b.set_body(root, b.seq({b.ref(ws), b.ref(value), b.ref(ws)}));
  return b.build(root);
}

std::shared_ptr<const Vocabulary> random_vocab(std::mt19937& rng, int n) {
  const std::string alphabet = " \"abc\\:,{}[]-012tru";
  std::vector<std::string> toks;
  for (char c : alphabet) toks.push_back(std::string(1, c));
  std::uniform_int_distribution<int> len(2, 6), pick(0, static_cast<int>(alphabet.size()) - 1);
  while (static_cast<int>(toks.size()) < n) {
    std::string t;
    for (int i = len(rng); i > 0; --i) t += alphabet[static_cast<size_t>(pick(rng))];
    toks.push_back(t);
  }
  toks.push_back("");       // a special token: never allowed
  toks.push_back("<eos>");  // the stop token (its bytes are ignored)
  const auto eos = static_cast<int32_t>(toks.size() - 1);
  return std::make_shared<Vocabulary>(std::move(toks), std::vector<int32_t>{eos});
}

bool bit(const std::vector<uint64_t>& w, int32_t t) { return (w[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1; }

// Walks the grammar by random allowed tokens (rolling back now and then), checking at every
// step that the mask, allows() and accepting() equal the byte-level reference. Returns the
// longest text walked.
size_t expect_masks_match_reference(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const Vocabulary>& vocab,
                                  std::mt19937& rng, int steps, const std::string& label) {
  auto cg = std::make_shared<CompiledGrammar>(g, vocab);
  Matcher m(cg);
  std::string text;
  std::vector<std::string> texts{text};
  std::vector<uint64_t> mask(static_cast<size_t>(vocab->size() + 63) / 64);
  size_t longest = 0;
  for (int step = 0; step < steps; ++step) {
    longest = std::max(longest, text.size());
    m.fill_mask(mask);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < vocab->size(); ++t) {
      bool expect;
      if (t == vocab->stop_ids()[0]) {
        expect = accepts(*g, text);
      } else if (vocab->bytes(t).empty()) {
        expect = false;
      } else {
        const std::string next = text + vocab->bytes(t);
        expect = viable_prefix(*g, next) == next.size();
      }
      EXPECT_EQ(bit(mask, t), expect) << label << " text '" << text << "' token '" << vocab->bytes(t) << "'";
      EXPECT_EQ(m.allows(t), expect);
      if (::testing::Test::HasFailure()) return longest;
      if (expect) allowed.push_back(t);
    }
    EXPECT_EQ(m.accepting(), accepts(*g, text));
    EXPECT_FALSE(allowed.empty()) << text;
    if (::testing::Test::HasFailure()) return longest;
    const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (t == vocab->stop_ids()[0]) break;
    EXPECT_TRUE(m.advance(t));
    text += vocab->bytes(t);
    texts.push_back(text);
    if (step % 7 == 6) {  // roll back two tokens now and then
      m.rollback(2);
      texts.resize(texts.size() - 2);
      text = texts.back();
    }
  }
  return longest;
}

TEST(Matcher, MaskEqualsByteLevelReferenceOnRandomWalks) {
  std::mt19937 rng(7);
  auto g = toy_json();
  for (int trial = 0; trial < 6; ++trial)
    expect_masks_match_reference(g, random_vocab(rng, 400), rng, 60, "trial " + std::to_string(trial));
}

// A long counted string whose characters are calls of a short rule (as JSON Schema's
// maxLength above a few hundred): its states are classified over the count state below, and
// share classes with other counts far from the end. Tokens longer than kClassDepth are
// checked at mask time.
TEST(Matcher, CountedCallsOfAShortRuleAndLongTokens) {
  GrammarBuilder b;
  const int32_t ch = b.add_rule("char"), root = b.add_rule("root");
  b.set_body(ch, b.alt({b.bytes(ByteSet::range('a', 'c')), b.seq({b.literal("\\"), b.bytes(ByteSet::of('n'))})}));
  const int32_t n = CompiledGrammar::kClassDepth + 40;
  b.set_body(root, b.seq({b.literal("\""), b.repeat(b.ref(ch), 0, n), b.literal("\"!")}));
  auto g = b.build(root);
  ASSERT_TRUE(g->short_rule(ch));
  ASSERT_FALSE(g->short_rule(root));
  std::mt19937 rng(11);
  std::vector<std::string> toks;
  for (const char* t : {"\"", "a", "b", "c", "\\n", "!", "\"!", "a\"", "\"!!"}) toks.push_back(t);
  std::uniform_int_distribution<int> len(2, 5), pick(0, 4);
  const std::string alphabet = "abc\\n";  // no quotes: the walks often reach the count's end
  while (toks.size() < 300) {
    std::string t;
    for (int i = len(rng); i > 0; --i) t += alphabet[static_cast<size_t>(pick(rng))];
    toks.push_back(t);
  }
  // Longer than the classification depth: fit early in the string, not near its end.
  for (int k : {CompiledGrammar::kClassDepth - 1, CompiledGrammar::kClassDepth, CompiledGrammar::kClassDepth + 9})
    for (const std::string& tail : {std::string(), std::string("\""), std::string("\"!")}) {
      toks.push_back(std::string(static_cast<size_t>(k), 'a') + tail);
      toks.push_back(std::string(static_cast<size_t>(k), 'b') + tail);
    }
  toks.push_back("<eos>");
  auto vocab = std::make_shared<Vocabulary>(toks, std::vector<int32_t>{static_cast<int32_t>(toks.size() - 1)});
  size_t longest = 0;
  for (int trial = 0; trial < 6; ++trial)
    longest = std::max(longest, expect_masks_match_reference(g, vocab, rng, 120, "trial " + std::to_string(trial)));
  EXPECT_GE(longest, static_cast<size_t>(n) - 4);  // some walk came near the count's end
}

TEST(Matcher, ForbiddenTokensDoNotAdvance) {
  auto g = toy_json();
  auto vocab = std::make_shared<Vocabulary>(std::vector<std::string>{"{", "}", "x", "\"a\"", ":", "1", "<eos>"}, std::vector<int32_t>{6});
  Matcher m(std::make_shared<CompiledGrammar>(g, vocab));
  EXPECT_FALSE(m.advance(2));
  EXPECT_FALSE(m.advance(6));
  EXPECT_EQ(m.num_advanced(), 0);
  for (int32_t t : {0, 3, 4, 5, 1}) ASSERT_TRUE(m.advance(t)) << t;
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.advance(6));
  EXPECT_TRUE(m.terminated());
  m.rollback(2);
  EXPECT_FALSE(m.accepting());
  EXPECT_TRUE(m.allows(1));
}


// The default model's answer to a corpus schema (062), token by token: closing the nested
// "tls" object pops through three frames. A closure once remembered the stacks it had visited
// by hash alone, two of them collided, the pops stopped early, and advance() refused the "}"
// the mask had allowed: the matcher stayed put and the model wrote "}" until max_tokens. At
// every step the mask must equal allows() over the vocabulary, and allowed tokens advance.
TEST(Matcher, MaskAndAdvanceAgreeOnARealAnswer) {
  const auto schema = nlohmann::ordered_json::parse(
      read_text_file(std::string(ZEN_SOURCE_DIR) + "/tests/fixtures/json_schemas/062_app_settings_layered.json"))["schema"];
  GrammarSpec spec;
  spec.kind = GrammarSpec::Kind::JsonSchema;
  spec.text = schema.dump();
  const std::vector<std::string> answer = {"{\"", "server", "\":", " {\"", "host", "\":", " \"", "1", "2", "7", ".", "0", ".", "0", ".", "1", "\",", " \"", "port", "\":", " ", "8", "0", "0", "0", ",", " \"", "cors", "_orig", "ins", "\":", " [\"", "http", "://", "localhost", ":", "8", "0", "0", "0", "\",", " \"", "https", "://", "localhost", ":", "8", "0", "0", "0", "\"],", " \"", "tls", "\":", " {\"", "cert", "_file", "\":", " \"", "path", "/to", "/c", "ert", ".pem", "\",", " \"", "key", "_file", "\":", " \"", "path", "/to", "/key", ".pem", "\"", "}", "}"};
  std::vector<std::string> toks(answer);
  for (const char* extra : {"}", "}}", ",", ", \"", ", \"model", "]", "\"}"}) toks.push_back(extra);
  toks.push_back("<eos>");
  auto vocab = std::make_shared<Vocabulary>(toks, std::vector<int32_t>{static_cast<int32_t>(toks.size() - 1)});
  Matcher m(std::make_shared<CompiledGrammar>(build_grammar(spec), vocab));
  std::vector<uint64_t> mask(static_cast<size_t>(vocab->size() + 63) / 64);
  for (size_t i = 0; i < answer.size(); ++i) {
    m.fill_mask(mask);
    for (int32_t t = 0; t < vocab->size(); ++t) ASSERT_EQ(bit(mask, t), m.allows(t)) << "step " << i << " token '" << toks[static_cast<size_t>(t)] << "'";
    ASSERT_TRUE(m.advance(static_cast<int32_t>(i))) << "step " << i << " '" << answer[i] << "'";
  }
  // "tls" and "server" are closed; "model" is required, so no third "}".
  EXPECT_FALSE(m.allows(static_cast<int32_t>(answer.size())));
  EXPECT_TRUE(m.allows(static_cast<int32_t>(answer.size() + 4)));
}

}  // namespace
}  // namespace zen::grammar
