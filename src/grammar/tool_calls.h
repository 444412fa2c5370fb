// Grammars for tool calls in a model's own format, so a forced call is always well formed and
// its arguments follow the tool's parameter schema:
//   hermes     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   qwen3_xml  <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
// The server writes a forced call's opening into the prompt (required: "<tool_call>\n";
// named: up to the arguments / the first parameter), so these grammars start after it.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace zen::grammar {

struct ToolGrammarSpec {
  enum class Format { Hermes, Qwen3Xml } format = Format::Hermes;
  // Auto: free text, and calls once "<tool_call>" opens one (a lazy grammar);
  // Required: one call of any tool; Named: one call of `name`.
  enum class Mode { Auto, Required, Named } mode = Mode::Auto;
  std::string name;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // OpenAI "tools"
};

// Adds the rules and returns the root. A tool whose "strict": true parameters use what cannot
// be enforced throws SchemaError with path "tools[i].function.parameters...".
int32_t tool_call_rules(GrammarBuilder& b, const ToolGrammarSpec& spec);

}  // namespace zen::grammar
