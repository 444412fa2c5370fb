// llama.cpp's GBNF grammar syntax (grammars/README.md there), so existing .gbnf files work
// unchanged: `name ::= body` rules, "literals" with escapes (\n \t \\ \" \xHH \uHHHH
// \UHHHHHHHH), [character classes] and [^negated], `.`, ( groups ), | alternatives,
// * + ? and {m} {m,} {m,n} repetitions, # comments, rule references by name.
#pragma once
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace zen::grammar {

// Adds the grammar's rules to b and returns the id of the rule named `root`. Throws zen::Error
// with line:column for a syntax error, an undefined rule or a missing root.
int32_t parse_gbnf(GrammarBuilder& b, std::string_view text, const std::string& root = "root");

}  // namespace zen::grammar
