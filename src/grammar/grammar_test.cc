#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace zen::grammar {
namespace {

TEST(GrammarBuilder, LiteralAlternationRepeat) {
  GrammarBuilder b;
  const int32_t root = b.add_rule("root");
  b.set_body(root, b.seq({b.literal("a"), b.repeat(b.alt({b.literal("bc"), b.literal("d")}), 1, 3), b.literal("!")}));
  auto g = b.build(root);
  EXPECT_TRUE(accepts(*g, "abc!"));
  EXPECT_TRUE(accepts(*g, "abcdbc!"));
  EXPECT_FALSE(accepts(*g, "a!"));
  EXPECT_FALSE(accepts(*g, "adddd!"));
  EXPECT_FALSE(accepts(*g, "ab!"));
  EXPECT_EQ(viable_prefix(*g, "abx"), 2u);
}

TEST(GrammarBuilder, RecursionThroughRules) {
  // balanced ::= "(" balanced* ")"
  GrammarBuilder b;
  const int32_t bal = b.add_rule("balanced");
  b.set_body(bal, b.seq({b.literal("("), b.star(b.ref(bal)), b.literal(")")}));
  auto g = b.build(bal);
  EXPECT_TRUE(accepts(*g, "()"));
  EXPECT_TRUE(accepts(*g, "(()(()))"));
  EXPECT_FALSE(accepts(*g, "(()"));
  EXPECT_FALSE(accepts(*g, "())"));
}

TEST(GrammarBuilder, NullableCallsAndEnd) {
  GrammarBuilder b;
  const int32_t ws = b.add_rule("ws"), root = b.add_rule("root");
  b.set_body(ws, b.star(b.bytes(ByteSet::of(' '))));
  b.set_body(root, b.seq({b.ref(ws), b.literal("x"), b.ref(ws)}));
  auto g = b.build(root);
  EXPECT_TRUE(accepts(*g, "x"));
  EXPECT_TRUE(accepts(*g, "  x "));
  EXPECT_FALSE(accepts(*g, " "));
}

TEST(GrammarBuilder, RefusesLeftRecursionAndUndefinedRules) {
  GrammarBuilder b;
  const int32_t e = b.add_rule("expr"), ws = b.add_rule("ws");
  b.set_body(ws, b.star(b.literal(" ")));
  b.set_body(e, b.alt({b.seq({b.ref(ws), b.ref(e), b.literal("+1")}), b.literal("1")}));
  EXPECT_THROW(b.build(e), Error);
  GrammarBuilder c;
  const int32_t r = c.add_rule("root"), u = c.add_rule("undefined");
  c.set_body(r, c.ref(u));
  EXPECT_THROW(c.build(r), Error);
}

TEST(GrammarBuilder, CodepointsEncodeUtf8) {
  GrammarBuilder b;
  const int32_t root = b.add_rule("root");
  b.set_body(root, b.star(b.codepoints_except({{'"', '"'}, {0, 0x1F}})));
  auto g = b.build(root);
  EXPECT_TRUE(accepts(*g, "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(*g, "a\"b"));
  EXPECT_FALSE(accepts(*g, "\xC3"));          // truncated
  EXPECT_FALSE(accepts(*g, "\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(accepts(*g, "\xC0\xAF"));      // overlong
}

TEST(GrammarBuilder, LimitsRefuseHugeRepeats) {
  GrammarLimits limits;
  limits.max_nfa_states = 10000;
  GrammarBuilder b(limits);
  const int32_t root = b.add_rule("root");
  b.set_body(root, b.repeat(b.literal("abc"), 0, 100000));
  EXPECT_THROW(b.build(root), Error);
}

TEST(GrammarBuilder, EmptyLanguageIsRefused) {
  GrammarBuilder b;
  const int32_t root = b.add_rule("root");
  b.set_body(root, b.alt({}));
  EXPECT_THROW(b.build(root), Error);
}

}  // namespace
}  // namespace zen::grammar

namespace zen::grammar {
namespace {

TEST(GrammarBuilder, UntilTerminatorAndAvoidingIt) {
  GrammarBuilder b;
  const int32_t root = b.add_rule("root");
  b.set_body(root, b.seq({b.until("</think>"), b.literal("\n{}")}));
  auto g = b.build(root);
  EXPECT_TRUE(accepts(*g, "</think>\n{}"));
  EXPECT_TRUE(accepts(*g, "hmm </thin </think </think>\n{}"));
  EXPECT_FALSE(accepts(*g, "a </think> b </think>\n{}"));  // the first terminator ends the text
  EXPECT_FALSE(accepts(*g, "no end\n{}"));
  GrammarBuilder c;
  const int32_t r2 = c.add_rule("root");
  c.set_body(r2, c.alt({c.until("<tc>", true), c.seq({c.until("<tc>"), c.literal("X")})}));
  auto g2 = c.build(r2);
  EXPECT_TRUE(accepts(*g2, ""));
  EXPECT_TRUE(accepts(*g2, "plain <t text <"));
  EXPECT_TRUE(accepts(*g2, "a <<tc>X"));
  EXPECT_FALSE(accepts(*g2, "a <tc>Y"));
  EXPECT_FALSE(accepts(*g2, "a <tc>"));
}

}  // namespace
}  // namespace zen::grammar
