// Regular expressions (the ECMAScript / Python subset JSON Schema `pattern` and vLLM's
// guided_regex use) compiled into a grammar expression.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace zen::grammar {

struct RegexOptions {
  // The whole output must match (guided_regex; std::regex_match semantics). When false the
  // pattern may match anywhere (JSON Schema `pattern`: an unanchored search), i.e. the result
  // is .*(pattern).* unless ^ / $ anchor it.
  bool full_match = true;
  // Match the JSON string encoding of the text (JSON Schema `pattern` inside a string value):
  // each character the pattern allows is produced in the forms a JSON string may spell it
  // (`"` as \", `\` as \\, control characters as \n \t ... or \u00XX; others literally or
  // as \uXXXX escapes are not produced: one spelling per character, the shortest).
  bool json_string = false;
};

// How json.dumps spells a character that needs an escape inside a string (\" \\ \n ...,
// \u00XX for other controls), or "" for a character written as is.
std::string json_escape(uint32_t cp);

// Throws zen::Error naming the position and the construct for what it cannot compile
// (backreferences, lookaround), never silently approximating.
ExprId parse_regex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options = {});

}  // namespace zen::grammar
