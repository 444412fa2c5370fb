#include "grammar/regex.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "base/error.h"

namespace zen::grammar {
namespace {

std::shared_ptr<const Grammar> compile(std::string_view pattern, RegexOptions options = {}) {
  GrammarBuilder b;
  const int32_t root = b.add_rule("root");
  b.set_body(root, parse_regex(b, pattern, options));
  return b.build(root);
}

RegexOptions search() { return {.full_match = false}; }
RegexOptions json(bool full = true) { return {.full_match = full, .json_string = true}; }

// The error message for a pattern that must be refused ("" when it was accepted).
std::string refusal(std::string_view pattern, RegexOptions options = {}) {
  try {
    GrammarBuilder b;
    parse_regex(b, pattern, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every string over the alphabet up to max_len, then random longer ones.
std::vector<std::string> sample_strings(const std::string& alphabet, size_t max_len, int n_random) {
  std::vector<std::string> out{""};
  for (size_t begin = 0, len = 1; len <= max_len; ++len) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i)
      for (char c : alphabet) out.push_back(out[i] + c);
    begin = end;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < n_random; ++i) {
    std::string s(5 + rng() % 8, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    out.push_back(s);
  }
  return out;
}

// Patterns std::regex (ECMAScript) and parse_regex read the same way. The alphabet holds no
// '\r': libstdc++'s ECMAScript `.` excludes it, Python's (ours) does not.
const char* const kPatterns[] = {
    "a", "ab", "a|b", "a*", "a+b?", "(ab)*", "(?:a|b)+1", "[ab]{2}", "[ab]{2,}", "[ab]{1,3}", "a{0}",
    "a{0,1}b", "[^a]*", "[a-c1]+", "\\d+", "\\D", "\\w*", "\\W+", "\\s", "\\S\\s\\S", ".", ".*", "a.b",
    "(a|b|)1", "a*?b", "a+?", "(a{1,2}?b)??", "\\.\\*\\+", "[.]", "[-a]", "[a-]", "\\x61\\u0062", "[a\\-b]+",
    "^a", "a$", "^ab$", "^a|b$", "(^a|b)1", "(a|b$)", "^$", "((a|b)(1|-))*", "a{2}b{1,}",
    "(?:ab|a)(?:ba|b)", "[^\\s]", "[\\w.]+", "-?\\d+(\\.\\d+)?", "\\n", "(?:a|b)*a(?:a|b)", "a{1,3}b{0,2}",
    "[^-a]", "(a|ab)(c|bcd)?", "\\+|\\*", "[+*]", "a\\|b", "(?:(?:a))", "[\\s\\d]", "[^\\w\\s]+",
    // Search trims leading and trailing repetition; these check it keeps the language.
    "b{2,3}1?", "(a+|1)-{1,2}", "a*b+a*", "(ab|b)+a?", "^a{2,}", "a{1,2}$", "(?:a?b?)1(?:a|b?)",
};

TEST(Regex, FullMatchAgreesWithStdRegex) {
  const auto strings = sample_strings("ab1-.* \n", 4, 400);
  for (const char* pattern : kPatterns) {
    const auto g = compile(pattern);
    const std::regex re(pattern, std::regex::ECMAScript);
    for (const std::string& s : strings)
      ASSERT_EQ(accepts(*g, s), std::regex_match(s, re)) << "pattern /" << pattern << "/ on \"" << s << "\"";
  }
}

TEST(Regex, SearchAgreesWithStdRegexSearch) {
  const auto strings = sample_strings("ab1-. \n", 4, 300);
  for (const char* pattern : kPatterns) {
    const auto g = compile(pattern, search());
    const std::regex re(pattern, std::regex::ECMAScript);
    for (const std::string& s : strings)
      ASSERT_EQ(accepts(*g, s), std::regex_search(s, re)) << "pattern /" << pattern << "/ on \"" << s << "\"";
  }
}

TEST(Regex, AnchorsUnderSearch) {
  const auto g = compile("^a|b$", search());
  EXPECT_TRUE(accepts(*g, "a"));
  EXPECT_TRUE(accepts(*g, "axx"));
  EXPECT_TRUE(accepts(*g, "xxb"));
  EXPECT_FALSE(accepts(*g, "xa"));
  EXPECT_FALSE(accepts(*g, "bx"));
  const auto empty = compile("", search());
  EXPECT_TRUE(accepts(*empty, ""));
  EXPECT_TRUE(accepts(*empty, "anything\n"));
  const auto py = compile("\\Aab\\Z", search());  // Python's \A \Z are ^ $
  EXPECT_TRUE(accepts(*py, "ab"));
  EXPECT_FALSE(accepts(*py, "abc"));
}

TEST(Regex, UnicodeClassesAndDot) {
  const auto greek = compile("[α-ω]+");
  EXPECT_TRUE(accepts(*greek, "αβω"));
  EXPECT_FALSE(accepts(*greek, "a"));
  const auto not_alpha = compile("[^α]");
  EXPECT_TRUE(accepts(*not_alpha, "β"));
  EXPECT_TRUE(accepts(*not_alpha, "a"));
  EXPECT_FALSE(accepts(*not_alpha, "α"));
  EXPECT_FALSE(accepts(*not_alpha, "\xce"));  // half a character
  const auto dot = compile(".");
  EXPECT_TRUE(accepts(*dot, "\xf0\x9f\x98\x80"));  // U+1F600
  EXPECT_TRUE(accepts(*dot, "\r"));
  EXPECT_FALSE(accepts(*dot, "\n"));
  EXPECT_FALSE(accepts(*dot, "\xed\xa0\x80"));  // a surrogate is not a character
  EXPECT_TRUE(accepts(*compile("\\s"), "\u3000"));
  EXPECT_FALSE(accepts(*compile("\\S"), "\u00a0"));
  EXPECT_TRUE(accepts(*compile("\\u{1F600}\\uD83D\\uDE00"), "\U0001F600\U0001F600"));
  EXPECT_TRUE(accepts(*compile("é{2}"), "éé"));
  EXPECT_TRUE(accepts(*compile("[\\u00e0-\\u00e9]\\x41"), "èA"));
}

TEST(Regex, GroupsEscapesAndLiteralBraces) {
  EXPECT_TRUE(accepts(*compile("(?P<year>\\d{4})-(?<m>\\d\\d)"), "2024-05"));
  EXPECT_TRUE(accepts(*compile("a(?#comment)b"), "ab"));
  EXPECT_TRUE(accepts(*compile("a{"), "a{"));
  EXPECT_TRUE(accepts(*compile("a{x}"), "a{x}"));
  EXPECT_TRUE(accepts(*compile("a{,2}"), "aa"));  // Python: {0,2}
  EXPECT_TRUE(accepts(*compile("a{,2}"), ""));
  EXPECT_TRUE(accepts(*compile("a}]"), "a}]"));
  EXPECT_TRUE(accepts(*compile("[\\w-.]+"), "a-b.c"));  // '-' next to \w is literal
  EXPECT_TRUE(accepts(*compile("[\\b]\\t\\f\\v\\0\\cJ"), std::string("\b\t\f\v\0\n", 6)));
  EXPECT_TRUE(accepts(*compile("\\/\\\\\\[\\]\\(\\)\\{\\}\\^\\$"), "/\\[](){}^$"));
  EXPECT_TRUE(accepts(*compile("[\\]\\\\^]+"), "]\\^"));
  EXPECT_TRUE(accepts(*compile("[[]"), "["));
}

TEST(Regex, HugeCountsStaySymbolic) {
  GrammarBuilder b;
  const int64_t before = b.num_exprs();
  parse_regex(b, "(ab{100000}){99999}");
  EXPECT_LT(b.num_exprs() - before, 20);
  EXPECT_NE(refusal("a{100001}").find("exceeds 100000"), std::string::npos);
  EXPECT_NE(refusal("a{0,99999999999999999999}").find("exceeds"), std::string::npos);
}

TEST(Regex, JsonStringSpellings) {
  const auto quote = compile("a\"b\\\\", json());
  EXPECT_TRUE(accepts(*quote, "a\\\"b\\\\"));
  EXPECT_FALSE(accepts(*quote, "a\"b\\"));
  const auto ctrl = compile("[\\x00-\\x1f]", json());
  for (const char* ok : {"\\u0000", "\\b", "\\t", "\\n", "\\f", "\\r", "\\u000b", "\\u001f", "\\u0001"})
    EXPECT_TRUE(accepts(*ctrl, ok)) << ok;
  for (const char* bad : {"\n", "\\u000a", "\\u001F", "\\u0008", "\\x00", "a"}) EXPECT_FALSE(accepts(*ctrl, bad)) << bad;
  const auto dot = compile(".+", json());
  EXPECT_TRUE(accepts(*dot, "é\\\"\\\\\\t"));
  EXPECT_FALSE(accepts(*dot, "\\n"));  // `.` excludes newline, in any spelling
  EXPECT_FALSE(accepts(*dot, "\\u00e9"));  // one spelling per character: é literally
  EXPECT_FALSE(accepts(*dot, "\""));
  const auto neg = compile("[^a]*", json());
  EXPECT_TRUE(accepts(*neg, "\\n\\\"b"));
  EXPECT_FALSE(accepts(*neg, "\\"));
  const auto inside = compile("ab", json(false));
  EXPECT_TRUE(accepts(*inside, "x\\\"ab\\n"));
  EXPECT_FALSE(accepts(*inside, "x\"ab"));
  EXPECT_FALSE(accepts(*inside, "a\\nb"));
}

TEST(Regex, RefusesWhatItCannotCompile) {
  struct Case {
    const char* pattern;
    const char* expect;  // part of the message
  };
  const Case cases[] = {
      {"a(?=b)", "lookahead '(?=' is not supported"},
      {"a(?!b)", "position 1: lookahead '(?!'"},
      {"(?<=a)b", "lookbehind '(?<='"},
      {"(?<!a)b", "lookbehind '(?<!'"},
      {"(a)\\1", "position 3: backreference '\\1'"},
      {"(?<x>a)\\k<x>", "backreference '\\k'"},
      {"(?P<x>a)(?P=x)", "backreference '(?P='"},
      {"a\\b", "position 1: word boundary '\\b'"},
      {"\\Ba", "word boundary '\\B'"},
      {"a^b", "position 1: '^' is only supported at the start"},
      {"a$b", "'$' is only supported at the end"},
      {"(a^)", "'^' is only supported"},
      {"(^a)*", "'^' is only supported"},
      {"^*a", "'^' is only supported"},
      {"(a", "position 0: missing ')'"},
      {"a)", "position 1: unmatched ')'"},
      {"[a", "missing ']'"},
      {"*a", "nothing to repeat"},
      {"a|+", "nothing to repeat"},
      {"{2}", "nothing to repeat"},
      {"a**", "multiple repeat"},
      {"a{2}{3}", "multiple repeat"},
      {"a*+", "multiple repeat"},
      {"a{2,1}", "out of order"},
      {"[b-a]", "out of order"},
      {"\\p{L}", "property escapes"},
      {"(?i)a", "inline flags"},
      {"(?>a)", "atomic group"},
      {"\\q", "unknown escape '\\q'"},
      {"[]a]", "']' at the start of a class"},
      {"[^]", "']' at the start of a class"},
      {"\\x4", "hex digits"},
      {"\\uD800", "lone surrogate"},
      {"\\u{110000}", "\\u{...}"},
      {"(?P<1a>x)", "group name"},
      {"(?<a", "group name"},
      {"a\\", "ends with '\\'"},
      {"\\012", "octal"},
      {"\xff", "invalid UTF-8"},
  };
  for (const Case& c : cases) {
    const std::string what = refusal(c.pattern);
    EXPECT_NE(what.find(c.expect), std::string::npos) << "pattern /" << c.pattern << "/ gave: " << what;
  }
}

TEST(Regex, GarbageNeverCrashes) {
  EXPECT_NE(refusal(std::string(100000, '(')).find("nested deeper"), std::string::npos);
  EXPECT_EQ(refusal(std::string(400, '(') + std::string(400, ')')), "");
  std::mt19937 rng(3);
  const std::string alphabet = "ab()[]{}|*+?^$\\.,-0123dDwWsSuxP<>=!:#";
  for (int i = 0; i < 1500; ++i) {
    std::string p(rng() % 14, ' ');
    for (char& c : p) c = alphabet[rng() % alphabet.size()];
    for (bool full : {true, false}) {
      try {
        GrammarBuilder b;
        const int32_t root = b.add_rule("root");
        b.set_body(root, parse_regex(b, p, {.full_match = full, .json_string = i % 2 == 1}));
        const auto g = b.build(root);
        accepts(*g, "ab(");
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace zen::grammar
