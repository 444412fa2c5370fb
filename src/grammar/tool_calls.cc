#include "grammar/tool_calls.h"

#include <algorithm>

#include "base/error.h"

namespace zen::grammar {

namespace {

using ojson = nlohmann::ordered_json;

std::string json_text(const std::string& s) { return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace); }

struct Tool {
  std::string name;
  ojson parameters;  // null: any JSON object
  bool strict = false;
  size_t index = 0;
};

std::vector<Tool> read_tools(const ojson& tools) {
  std::vector<Tool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    // The server validated these; other callers get an error, not an exception from json.
    const ojson& tool = tools[i];
    const auto fit = tool.is_object() ? tool.find("function") : tool.end();
    if (!tool.is_object() || fit == tool.end() || !fit->is_object() || !fit->contains("name") || !(*fit)["name"].is_string())
      fail("tools[", i, "] must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    const ojson& fn = *fit;
    Tool t;
    t.name = fn["name"].get<std::string>();
    if (auto p = fn.find("parameters"); p != fn.end()) t.parameters = *p;
    if (auto s = fn.find("strict"); s != fn.end() && s->is_boolean()) t.strict = s->get<bool>();
    t.index = i;
    out.push_back(std::move(t));
  }
  return out;
}

// The rule of a tool's arguments as a JSON object. Strict tools refuse what cannot be
// enforced; the others are enforced as far as the schema front end can.
int32_t arguments_rule(GrammarBuilder& b, const Tool& t) {
  JsonSchemaOptions o;
  o.strict = t.strict;
  if (t.parameters.is_null()) return json_object_rules(b, o);
  try {
    return json_schema_rules(b, t.parameters, o);
  } catch (const SchemaError& e) {
    const std::string path = "tools[" + std::to_string(t.index) + "].function.parameters" + e.path;
    throw SchemaError(e.keyword, path, "Invalid schema for function '" + t.name + "': " + e.what());
  }
}

ExprId hermes_call(GrammarBuilder& b, const Tool& t) {
  return b.seq({b.literal("{\"name\": " + json_text(t.name) + ", \"arguments\": "), b.ref(arguments_rule(b, t)), b.literal("}")});
}

// One parameter's value as qwen3_xml writes it, with its closing line: strings as raw text,
// everything else as JSON per the property's schema.
ExprId xml_parameter(GrammarBuilder& b, const Tool& t, const std::string& key, const ojson& schema) {
  const ExprId open = b.literal("<parameter=" + key + ">\n");
  const bool is_string = schema.is_object() && schema.value("type", ojson()).is_string() && schema["type"] == "string" &&
                         !schema.contains("enum") && !schema.contains("const") && !schema.contains("pattern");
  if (is_string || !schema.is_object()) return b.seq({open, b.until("\n</parameter>"), b.literal("\n")});
  Tool sub = t;
  sub.parameters = schema;
  JsonSchemaOptions o;
  o.strict = t.strict;
  int32_t value;
  try {
    value = json_schema_rules(b, schema, o);
  } catch (const SchemaError& e) {
    const std::string path = "tools[" + std::to_string(t.index) + "].function.parameters.properties." + key + e.path;
    throw SchemaError(e.keyword, path, "Invalid schema for function '" + t.name + "': " + e.what());
  }
  return b.seq({open, b.ref(value), b.literal("\n</parameter>\n")});
}

// The parameters of a call, in schema order; required ones always, the rest optional.
ExprId xml_parameters(GrammarBuilder& b, const Tool& t) {
  const ojson& p = t.parameters;
  if (!p.is_object() || !p.contains("properties") || !p["properties"].is_object()) return b.empty();
  std::vector<std::string> required;
  if (auto r = p.find("required"); r != p.end() && r->is_array())
    for (const auto& k : *r)
      if (k.is_string()) required.push_back(k.get<std::string>());
  std::vector<ExprId> parts;
  for (const auto& [key, schema] : p["properties"].items()) {
    const ExprId one = xml_parameter(b, t, key, schema);
    const bool req = std::find(required.begin(), required.end(), key) != required.end();
    parts.push_back(req ? one : b.opt(one));
  }
  return b.seq(std::move(parts));
}

ExprId xml_call(GrammarBuilder& b, const Tool& t) {
  return b.seq({b.literal("<function=" + t.name + ">\n"), xml_parameters(b, t), b.literal("</function>")});
}

}  // namespace

int32_t tool_call_rules(GrammarBuilder& b, const ToolGrammarSpec& spec) {
  if (!spec.tools.is_array() || spec.tools.empty()) fail("tool-call grammar: no tools");
  const std::vector<Tool> tools = read_tools(spec.tools);
  const bool hermes = spec.format == ToolGrammarSpec::Format::Hermes;
  const int32_t root = b.add_rule("root");
  if (spec.mode == ToolGrammarSpec::Mode::Named) {
    const Tool* t = nullptr;
    for (const Tool& x : tools)
      if (x.name == spec.name) t = &x;
    if (!t) fail("tool-call grammar: no tool named '", spec.name, "'");
    // After the prefilled opening: the rest of this one call.
    const ExprId rest = hermes ? b.seq({b.ref(arguments_rule(b, *t)), b.literal("}")})
                               : b.seq({xml_parameters(b, *t), b.literal("</function>")});
    b.set_body(root, b.seq({rest, b.literal("\n</tool_call>"), b.repeat(b.bytes(ByteSet::of('\n')), 0, 2)}));
    return root;
  }
  const int32_t call = b.add_rule("call");
  std::vector<ExprId> any;
  for (const Tool& t : tools) any.push_back(hermes ? hermes_call(b, t) : xml_call(b, t));
  b.set_body(call, b.alt(std::move(any)));
  // One call closed, then any further calls (parallel tool calls), then the line break models
  // write before their end-of-turn token (without it a model that wants "\n" is pushed into
  // another call).
  const ExprId calls = b.seq({b.ref(call), b.literal("\n</tool_call>"),
                              b.star(b.seq({b.literal("\n<tool_call>\n"), b.ref(call), b.literal("\n</tool_call>")})),
                              b.repeat(b.bytes(ByteSet::of('\n')), 0, 2)});
  if (spec.mode == ToolGrammarSpec::Mode::Required) {
    // One call ("<tool_call>\n" is in the prompt): small models offered further calls keep
    // calling (the default model repeats the call of a few-shot turn); "auto" allows several.
    b.set_body(root, b.seq({b.ref(call), b.literal("\n</tool_call>"), b.repeat(b.bytes(ByteSet::of('\n')), 0, 2)}));
  } else {
    b.set_body(root, b.alt({b.until(std::string("<tool_call>"), true),
                            b.seq({b.until(std::string("<tool_call>")), b.literal("\n"), calls})}));
  }
  return root;
}

}  // namespace zen::grammar
