// JSON Schema (draft 2020-12 and the draft-07 spellings OpenAI and pydantic emit) compiled
// into a grammar producing exactly the JSON texts that validate, with a fixed layout:
// compact separators `, ` and `: ` as json.dumps writes them, properties in the order the
// schema lists them. Also free JSON (response_format json_object).
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace zen::grammar {

struct JsonSchemaOptions {
  // strict: every keyword must be enforced or the schema is refused (SchemaError naming the
  // keyword); not strict: keywords that cannot be enforced are ignored (the README lists them).
  bool strict = true;
  // Whitespace between tokens: false = the fixed layout above; true = any JSON whitespace
  // (bounded, at most max_whitespace bytes at each place, so a model cannot loop on spaces).
  bool any_whitespace = false;
  int max_whitespace = 8;
  // Object properties not required by the schema may be left out in any combination, but
  // those present keep the schema's order.
};

// A schema that is invalid, unsupported under strict, or too large. `keyword` is the JSON
// Schema keyword at fault (e.g. "pattern", "$ref"), `path` a JSON pointer to where it is.
struct SchemaError : std::runtime_error {
  SchemaError(std::string keyword_, std::string path_, const std::string& message)
      : std::runtime_error(message), keyword(std::move(keyword_)), path(std::move(path_)) {}
  std::string keyword, path;
};

// Adds the schema's rules to b and returns the root rule.
int32_t json_schema_rules(GrammarBuilder& b, const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});
// Any JSON value whose top level is an object (OpenAI's json_object mode).
int32_t json_object_rules(GrammarBuilder& b, const JsonSchemaOptions& options = {});
// Any JSON value.
int32_t json_value_rules(GrammarBuilder& b, const JsonSchemaOptions& options = {});

}  // namespace zen::grammar
