// Tokenizer of jinja2 template source, configured as transformers configures jinja2 for chat
// templates: trim_blocks and lstrip_blocks on, keep_trailing_newline off, default delimiters.
// Whitespace control ({%- -%} {{- -}} {#- -#}, and '+' to opt out) and raw blocks are resolved
// here, so the parser sees only data, tag delimiters and expression tokens.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zen::jinja {

enum class TokenType {
  kData,           // literal template text (already whitespace-trimmed)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,         // value holds the unescaped text
  kInteger,
  kFloat,
  kOperator,       // value holds the operator text: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;
  int64_t integer = 0;
  double real = 0;
  size_t offset = 0;  // into the normalized source
};

// Where an offset of the normalized source lies, for error messages.
class SourceMap {
 public:
  explicit SourceMap(std::string_view source);
  std::string describe(size_t offset) const;  // "line 3, column 7"

 private:
  std::vector<size_t> line_starts_;
};

// jinja2 first turns \r\n and \r into \n and drops one trailing newline.
std::string normalize_newlines(std::string_view source);

// Tokens of a normalized source, ending with kEof. Throws zen::Error with line and column.
std::vector<Token> tokenize(const std::string& source, const SourceMap& map);

// "chat template: syntax error at line L, column C: message"
[[noreturn]] void syntax_error(const SourceMap& map, size_t offset, const std::string& message);

}  // namespace zen::jinja
