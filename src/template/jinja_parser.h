// Parser of jinja2 template source into a syntax tree, following jinja2's grammar (operator
// precedence, tuples, filters and tests, statement tags) for the subset chat templates use.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"

namespace zen::jinja {

struct ParsedTemplate {
  explicit ParsedTemplate(std::string normalized) : source(std::move(normalized)), map(source) {}
  std::string source;  // newline-normalized
  SourceMap map;
  Body body;
};

// Throws zen::Error naming line and column on malformed source, an unknown tag, or (as jinja2
// does at compile time) a filter or test name jinja2 does not know, outside conditionals.
std::unique_ptr<ParsedTemplate> parse_template(std::string_view source);

}  // namespace zen::jinja
