#include "grammar/gbnf.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

#include "base/error.h"

namespace zen::grammar {
namespace {

std::shared_ptr<const Grammar> compile(std::string_view text, const std::string& root = "root") {
  GrammarBuilder b;
  return b.build(parse_gbnf(b, text, root));
}

// The message of the error parsing text gives ("" when it parses).
std::string refusal(std::string_view text) {
  try {
    GrammarBuilder b;
    parse_gbnf(b, text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_language(const Grammar& g, std::initializer_list<const char*> yes, std::initializer_list<const char*> no) {
  for (const char* s : yes) EXPECT_TRUE(accepts(g, s)) << "should accept: " << s;
  for (const char* s : no) EXPECT_FALSE(accepts(g, s)) << "should reject: " << s;
}

// JSON in the layout llama.cpp's example grammars use: bodies spread over lines inside
// parentheses, comments after `|`, an empty first alternative, {n} and {m,n}.
constexpr const char* kJson = R"gbnf(
# JSON text
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
    member
    ("," ws member)*   # further members
  )? "}" ws
member ::= string ":" ws value

array ::= "[" ws ( value ("," ws value)* )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |        # a plain character
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})  # an escape
  )* "\"" ws

number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws     ::= | " " | "\n" [ \t]{0,20}
)gbnf";

TEST(Gbnf, JsonGrammar) {
  const auto g = compile(kJson);
  expect_language(*g,
                  {"{\"a\": 1}", "[1, 2.5, -3e10, \"x\\\"y\\u00e9\", true, null, {}]", "{\"k\":[{\"z\":false}]}",
                   "\"\xc3\xa9\xe2\x82\xac\"", "{\n  \"a\": [ ]\n}", "0", "-0.5E+3"},
                  {"{a: 1}", "[1,]", "01", "\"\\x\"", "{\"a\" 1}", "\"", "\"tab\there\"", "[1 2]", "truefalse",
                   "\"\\u12g4\"", "{\"a\":1}}"});
}

// Arithmetic with precedence levels; `var-name` uses the '-' llama.cpp allows in names.
constexpr const char* kArithmetic = R"gbnf(
root     ::= ws expr ws
expr     ::= term (ws [-+] ws term)*
term     ::= factor (ws [*/] ws factor)*
factor   ::= number | var-name | "(" ws expr ws ")" | "-" factor
number   ::= [0-9]+ ("." [0-9]+)?
var-name ::= [a-z_] [a-z0-9_]*
ws       ::= [ \t]*
)gbnf";

TEST(Gbnf, ArithmeticGrammar) {
  const auto g = compile(kArithmetic);
  expect_language(*g, {"1+2*3", " (a - b) / 2.5 ", "-x*-(y)", "x_1 * 10", "((((1))))", "0.25"},
                  {"1+", "(1", "1 2", "*3", "1..2", "A", "", "()", "1+2)"});
}

// A small C-like language, statements as parenthesized alternatives over several lines.
constexpr const char* kCLike = R"gbnf(
root ::= (ws function)* ws

function ::= type " " ident "(" params? ")" ws block
type     ::= "int" | "void" | "char"
params   ::= type " " ident ("," ws type " " ident)*
block    ::= "{" (ws statement)* ws "}"

statement ::=
    ( "return" (" " expr)? ";" ) |
    ( type " " ident (ws "=" ws expr)? ";" ) |
    ( ident ws "=" ws expr ";" ) |
    ( "if" ws "(" expr ")" ws block (ws "else" ws block)? ) |
    ( "while" ws "(" expr ")" ws block ) |
    ( ident "(" args? ")" ";" )

expr    ::= operand (ws op ws operand)*
operand ::= ident | [0-9]+ | ident "(" args? ")" | "(" ws expr ws ")"
args    ::= expr ("," ws expr)*
op      ::= "+" | "-" | "*" | "/" | "<" | ">" | "==" | "!=" | "<=" | ">="
ident   ::= [a-zA-Z_] [a-zA-Z_0-9]*

comment ::= "//" [^\n]* "\n" | "/*" ( [^*] | "*"+ [^*/] )* "*"+ "/"
ws      ::= ([ \t\n] | comment)*
)gbnf";

TEST(Gbnf, CLikeGrammar) {
  const auto g = compile(kCLike);
  const char* program = R"(
int main() {
  int x = 1;
  // count to ten
  while (x < 10) { x = x + 1; }
  if (x == 10) { print(x, 2); return x; } else { return 0; }
}
/* a second function **/
void f(int a, char b) { g(); }
)";
  expect_language(*g, {program, "", "int f(){}", " void g(char c) {}\n"},
                  {"int main() { int x = 1 }", "int main() {", "int 1x() {}", "int f() { x = ; }",
                   "int f() {} /* open", "float f() {}"});
}

TEST(Gbnf, ExampleGrammarConstructs) {
  // In the style of llama.cpp's list, japanese and chess grammars.
  const auto list = compile("root ::= item+\n# no line breaks inside an item\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n");
  expect_language(*list, {"- a\n- b c\n", "- \xe2\x82\xac\n"}, {"- a", "- a\rb\n", "- \xe2\x80\xa8\n", "-\n"});
  const auto kana = compile("root ::= kana-char+ ([ \\t\\n] kana-char+)*\nkana-char ::= hira | kata\n"
                            "hira ::= [ぁ-ゟ]\nkata ::= [ァ-ヿ]\n");
  expect_language(*kana, {"ひらがな", "カタ カナ"}, {"abc", "ひ  ら", ""});
  const auto chess = compile("root ::= move (\" \" move)*\nmove ::= (piece | castle) [+#]?\n"
                             "piece ::= [NBKQR]? [a-h] [1-8]\ncastle ::= \"O-O\" \"-O\"?\n");
  expect_language(*chess, {"e4 Nf3 O-O-O+", "O-O#"}, {"O-", "e9", "Ke4 "});
}

TEST(Gbnf, Syntax) {
  // Forward references, CRLF, comments, spaces inside braces, `name(` adjacency.
  const auto g = compile("root ::= greeting(\" \" name){ 1 , 2 } # trailing comment\r\n"
                         "\r\n"
                         "greeting ::= \"hi\" | \"hello\"\r\n"
                         "name ::= [A-Z] [a-z]{2,} \"\\U0001F600\"?\r\n");
  expect_language(*g, {"hi Bob", "hello Ann Eve\xf0\x9f\x98\x80"}, {"hi", "hi Bo", "hi Bob Ann Eve"});
  // Escapes in literals and classes; `.` is any one character, newline included.
  const auto esc = compile(R"(root ::= "\x41\u00e9\t\"\\" [\[\]\-] . [^a-c])");
  expect_language(*esc, {"A\xc3\xa9\t\"\\]\n\xe2\x82\xac", "A\xc3\xa9\t\"\\-xd"}, {"A\xc3\xa9\t\"\\]xa", "A\xc3\xa9\t\"\\]x"});
  // Repetition bounds and an empty rule body.
  const auto reps = compile("root ::= \"a\"{2,} \"b\"{0} \"c\"{3} empty\nempty ::= \"\"\n");
  expect_language(*reps, {"aaccc", "aaaaaccc"}, {"accc", "aacc", "aabccc"});
  // A custom root; the builder's own rule names do not clash with the grammar's.
  GrammarBuilder b;
  b.add_rule("start");
  const int32_t start = parse_gbnf(b, "start ::= \"x\" other\nother ::= \"y\"\n", "start");
  EXPECT_NE(start, b.rule_id("start"));
  EXPECT_TRUE(accepts(*b.build(start), "xy"));
}

TEST(Gbnf, ContinuationLines) {
  // Extension: a body may go on after a newline unless the next line starts a rule.
  const auto g = compile("root ::=\n  \"a\"\n  | \"b\" \"c\"\n  | \"d\" |\n  \"e\"\nother ::= \"x\"\n  # comment\n");
  expect_language(*g, {"a", "bc", "d", "e"}, {"x", "b", ""});
  // A newline before `name ::=` ends the rule, even with comments and blank lines between.
  const auto two = compile("root ::= \"a\" x\n\n  # about x\n x ::= \"b\"\n");
  expect_language(*two, {"ab"}, {"a", "abx"});
}

TEST(Gbnf, ErrorsCarryLineAndColumn) {
  struct Case {
    const char* text;
    const char* expect;  // part of the message
  };
  const Case cases[] = {
      {"root ::= \"a\" (", "gbnf:1:15: expected ')' to close the '(' at 1:14, found end of input"},
      {"root ::= foo", "gbnf:1:10: undefined rule 'foo'"},
      {"root ::= \"a\"\n\nroot ::= \"b\"", "gbnf:3:1: rule 'root' is defined twice (first at 1:1)"},
      {"root ::= [a", "gbnf:1:10: unterminated character class"},
      {"root ::= \"abc", "gbnf:1:10: unterminated string literal"},
      {"root ::= \"\\q\"", "gbnf:1:11: unknown escape 'q'"},
      {"root ::= *", "gbnf:1:10: '*' has nothing before it to repeat"},
      {"root ::= (| \"a\"+ )?\n  | +", "gbnf:2:5: '+' has nothing"},
      {"root ::= \"a\"{3,1}", "gbnf:1:13: repetition {3,1} has its bounds out of order"},
      {"root ::= \"a\"{x}", "gbnf:1:14: expected a number"},
      {"root ::= \"a\"{2", "gbnf:1:15: expected '}'"},
      {"root ::= \"a\"{100001}", "repetition count exceeds 100000"},
      {"root \"a\"", "gbnf:1:6: expected '::=' after rule name 'root'"},
      {"  ::= \"a\"", "gbnf:1:3: expected a rule name, found ':'"},
      {"root ::= \"a\" )", "gbnf:1:14: unexpected ')' in rule 'root'"},
      {"root ::= \"a\" b ::= \"c\"", "gbnf:1:16: unexpected ':'"},
      {"root ::= <[12]>", "gbnf:1:10: token references"},
      {"root ::= \"\\xZZ\"", "gbnf:1:13: expected 2 hex digits in the escape at 1:11"},
      {"root ::= \"\\U00110000\"", "past U+10FFFF"},
      {"root ::= \"\\uD800\"", "surrogate"},
      {"root ::= [z-a]", "gbnf:1:11: character range out of order"},
      {"root ::= []", "gbnf:1:10: empty character class"},
      {"root ::= \"\xff\"", "gbnf:1:11: invalid UTF-8"},
      {"root ::= \"\xc3\xa9\xc3\xa9\" )", "gbnf:1:15: unexpected ')'"},  // columns count characters
      {"a ::= \"x\"", "gbnf: no rule named 'root'"},
      {"root ::= \"x\"\n\xc3\xa9 ::= \"y\"", "gbnf:2:1: unexpected byte 0xc3 in rule 'root'"},
  };
  for (const Case& c : cases) {
    const std::string what = refusal(c.text);
    EXPECT_NE(what.find(c.expect), std::string::npos) << "grammar: " << c.text << "\ngave: " << what;
  }
}

TEST(Gbnf, LeftRecursionIsReportedByBuild) {
  GrammarBuilder b;
  const int32_t root = parse_gbnf(b, "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n");
  EXPECT_THROW(b.build(root), Error);
}

TEST(Gbnf, GarbageNeverCrashes) {
  EXPECT_NE(refusal("root ::= " + std::string(100000, '(')).find("nested deeper"), std::string::npos);
  EXPECT_EQ(refusal("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')')), "");
  std::mt19937 rng(11);
  const std::string alphabet = "ab-:= |()[]{}^*+?.\"\\#\nxuU0129,";
  for (int i = 0; i < 3000; ++i) {
    std::string text = i % 3 == 0 ? "root ::= " : "";
    for (size_t n = rng() % 24; n > 0; --n)
      text += i % 5 == 4 ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    try {
      GrammarBuilder b;
      const auto g = b.build(parse_gbnf(b, text));
      accepts(*g, "ab");
    } catch (const Error&) {
    }
  }
  // Real grammars with a few bytes changed, dropped or inserted.
  for (int i = 0; i < 600; ++i) {
    std::string text = i % 2 ? kJson : kCLike;
    for (int k = 0; k < 1 + i % 3; ++k) {
      const size_t at = rng() % text.size();
      const char c = alphabet[rng() % alphabet.size()];
      if (k % 3 == 0) text[at] = c;
      else if (k % 3 == 1) text.erase(at, 1);
      else text.insert(at, 1, c);
    }
    try {
      GrammarBuilder b;
      const auto g = b.build(parse_gbnf(b, text));
      accepts(*g, "{\"a\": [1]}");
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace zen::grammar
