#include "server/request.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "server/api_error.h"

namespace zen::server {
namespace {

const char* type_name(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    default: return "a number";
  }
}

// Typed access to optional fields; absent and null read as "not given".
class Fields {
 public:
  Fields(const ojson& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  const ojson* get(const std::string& key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string name(const std::string& key) const { return prefix_ + key; }

  bool boolean(const std::string& key, bool fallback) const {
    const ojson* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) invalid_param(name(key), "must be a boolean, got ", type_name(*v));
    return v->get<bool>();
  }
  double number(const std::string& key, double fallback, double lo, double hi) const {
    const ojson* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) invalid_param(name(key), "must be a number, got ", type_name(*v));
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) invalid_param(name(key), "must be in [", lo, ", ", hi, "], got ", v->dump());
    return x;
  }
  int64_t integer(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
    const ojson* v = get(key);
    if (v == nullptr) return fallback;
    int64_t x = 0;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) invalid_param(name(key), "must be in [", lo, ", ", hi, "], got ", v->dump());
      x = static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
      x = v->get<int64_t>();
    } else if (v->is_number_float()) {
      const double d = v->get<double>();
      if (!(std::floor(d) == d) || !(std::fabs(d) < 9e18)) invalid_param(name(key), "must be an integer, got ", v->dump());
      x = static_cast<int64_t>(d);
    } else {
      invalid_param(name(key), "must be an integer, got ", type_name(*v));
    }
    if (x < lo || x > hi) invalid_param(name(key), "must be in [", lo, ", ", hi, "], got ", x);
    return x;
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    const ojson* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) invalid_param(name(key), "must be a string, got ", type_name(*v));
    return v->get<std::string>();
  }

 private:
  const ojson& obj_;
  std::string prefix_;
};

constexpr int64_t kMaxTokensLimit = int64_t{1} << 40;

// A schema given as an object, or as JSON text (vLLM accepts both for guided_json).
std::string schema_text(const ojson& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    try {
      const ojson parsed = parse_json_body(v.get<std::string>());
      if (parsed.is_object() || parsed.is_boolean()) return parsed.dump();
    } catch (const ApiError&) {
    }
  }
  invalid_param(param, "must be a JSON Schema (an object, or its JSON text)");
}

std::vector<std::string> choice_list(const ojson& v, const std::string& param) {
  if (!v.is_array() || v.empty()) invalid_param(param, "must be a non-empty array of strings");
  std::vector<std::string> out;
  for (const auto& c : v) {
    if (!c.is_string()) invalid_param(param, "must be an array of strings, found ", type_name(c));
    out.push_back(c.get<std::string>());
  }
  return out;
}

// response_format (OpenAI), structured_outputs and guided_* (vLLM), grammar and json_schema
// (llama.cpp): at most one of them. Strict JSON Schemas refuse keywords that cannot be
// enforced; the others enforce what they can.
void parse_structured_output(const ojson& body, GenerationRequest& r) {
  using Kind = grammar::GrammarSpec::Kind;
  Fields f(body, "");
  auto set = [&](const std::string& param, Kind kind, std::string text, bool strict) {
    if (r.grammar) invalid_param(param, "cannot be combined with '", r.grammar_param, "' (one output constraint per request)");
    grammar::GrammarSpec spec;
    spec.kind = kind;
    spec.text = std::move(text);
    spec.json.strict = strict;
    r.grammar = std::move(spec);
    r.grammar_param = param;
  };
  if (const ojson* rf = f.get("response_format")) {
    if (!rf->is_object()) invalid_param("response_format", "must be an object, got ", type_name(*rf));
    Fields rff(*rf, "response_format.");
    const std::string type = rff.string("type", "");
    if (type == "json_object") {
      set("response_format", Kind::JsonObject, "", false);
    } else if (type == "json_schema") {
      const ojson* js = rff.get("json_schema");
      if (js == nullptr || !js->is_object()) invalid_param("response_format.json_schema", "must be an object with a schema");
      Fields jf(*js, "response_format.json_schema.");
      const std::string name = jf.string("name", "");
      const ojson* schema = jf.get("schema");
      if (schema == nullptr) invalid_param("response_format.json_schema.schema", "is required");
      set("response_format", Kind::JsonSchema, schema_text(*schema, "response_format.json_schema.schema"), jf.boolean("strict", false));
      r.schema_name = name;
    } else if (type != "text") {
      invalid_param("response_format.type", "must be 'text', 'json_object' or 'json_schema'; got '", type, "'");
    }
  }
  if (const ojson* so = f.get("structured_outputs")) {
    if (!so->is_object()) invalid_param("structured_outputs", "must be an object, got ", type_name(*so));
    Fields sf(*so, "structured_outputs.");
    if (const ojson* v = sf.get("json")) set("structured_outputs", Kind::JsonSchema, schema_text(*v, "structured_outputs.json"), false);
    if (sf.get("regex") != nullptr) set("structured_outputs", Kind::Regex, sf.string("regex", ""), false);
    if (const ojson* v = sf.get("choice")) {
      set("structured_outputs", Kind::Choice, "", false);
      r.grammar->choices = choice_list(*v, "structured_outputs.choice");
    }
    if (sf.get("grammar") != nullptr) set("structured_outputs", Kind::Gbnf, sf.string("grammar", ""), false);
    if (sf.boolean("json_object", false)) set("structured_outputs", Kind::JsonObject, "", false);
    for (const char* unsupported : {"structural_tag"})
      if (sf.get(unsupported) != nullptr) invalid_param(std::string("structured_outputs.") + unsupported, "is not supported");
  }
  if (const ojson* v = f.get("guided_json")) set("guided_json", Kind::JsonSchema, schema_text(*v, "guided_json"), false);
  if (f.get("guided_regex") != nullptr) set("guided_regex", Kind::Regex, f.string("guided_regex", ""), false);
  if (const ojson* v = f.get("guided_choice")) {
    set("guided_choice", Kind::Choice, "", false);
    r.grammar->choices = choice_list(*v, "guided_choice");
  }
  if (f.get("guided_grammar") != nullptr) set("guided_grammar", Kind::Gbnf, f.string("guided_grammar", ""), false);
  if (f.get("grammar") != nullptr) set("grammar", Kind::Gbnf, f.string("grammar", ""), false);
  if (const ojson* v = f.get("json_schema")) set("json_schema", Kind::JsonSchema, schema_text(*v, "json_schema"), false);
  if (f.get("guided_whitespace_pattern") != nullptr)
    invalid_param("guided_whitespace_pattern", "is not supported (JSON output uses the layout of json.dumps)");
}

// Parameters shared by both endpoints.
void parse_common(const ojson& body, GenerationRequest& r) {
  if (!body.is_object()) throw ApiError(400, "invalid_request_error", "the request body must be a JSON object");
  Fields f(body, "");
  r.model = f.string("model", "");
  r.stream = f.boolean("stream", false);
  if (const ojson* so = f.get("stream_options")) {
    if (!so->is_object()) invalid_param("stream_options", "must be an object, got ", type_name(*so));
    r.include_usage = Fields(*so, "stream_options.").boolean("include_usage", false);
  }
  SamplingParams& s = r.params.sampling;
  s.temperature = static_cast<float>(f.number("temperature", 1.0, 0.0, 2.0));
  s.top_p = static_cast<float>(f.number("top_p", 1.0, 0.0, 1.0));
  if (s.top_p <= 0.0f) invalid_param("top_p", "must be in (0, 1], got 0");
  const int64_t top_k = f.integer("top_k", 0, -1, std::numeric_limits<int32_t>::max());
  s.top_k = static_cast<int32_t>(top_k < 0 ? 0 : top_k);  // -1 (vLLM) and 0 both mean off
  s.min_p = static_cast<float>(f.number("min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = static_cast<float>(f.number("presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(f.number("frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty = static_cast<float>(f.number("repetition_penalty", 1.0, 0.01, 100.0));
  if (f.get("seed") != nullptr) {
    s.has_seed = true;
    s.seed = static_cast<uint64_t>(f.integer("seed", 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  }
  if (const ojson* bias = f.get("logit_bias"); bias != nullptr && !bias->is_null()) {
    // OpenAI: {"token id": bias in [-100, 100]}; ids beyond the vocabulary are refused by the engine.
    if (!bias->is_object()) invalid_param("logit_bias", "must be an object mapping token ids to biases, got ", type_name(*bias));
    if (bias->size() > SamplingParams::kMaxLogitBias)
      invalid_param("logit_bias", "may hold at most ", SamplingParams::kMaxLogitBias, " tokens, got ", bias->size());
    for (const auto& [key, value] : bias->items()) {
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id > std::numeric_limits<int32_t>::max())
        invalid_param("logit_bias", "keys must be token ids (non-negative integers as strings), got '", key, "'");
      if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0))
        invalid_param("logit_bias", "the bias of token ", key, " must be a number in [-100, 100]");
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(value.get<double>()));
    }
  }
  r.n = static_cast<int32_t>(f.integer("n", 1, 1, GenerationRequest::kMaxChoices));
  r.params.ignore_eos = f.boolean("ignore_eos", false);

  // max_completion_tokens (current OpenAI name) wins over the older max_tokens.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (f.get(key) == nullptr) continue;
    r.params.max_tokens = f.integer(key, 0, 1, kMaxTokensLimit);
    r.max_tokens_given = true;
  }

  if (const ojson* stop = f.get("stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 16) invalid_param("stop", "may hold at most 16 strings, got ", stop->size());
      for (const auto& s2 : *stop) {
        if (!s2.is_string()) invalid_param("stop", "must be a string or an array of strings, found ", type_name(s2));
        r.stop.push_back(s2.get<std::string>());
      }
    } else {
      invalid_param("stop", "must be a string or an array of strings, got ", type_name(*stop));
    }
    for (const auto& s2 : r.stop)
      if (s2.empty()) invalid_param("stop", "must not contain an empty string");
  }
  parse_structured_output(body, r);
}

// Message content as the chat template expects it: a string (text parts joined).
ojson normalize_content(const ojson& content, const std::string& param) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) invalid_param(param, "must be a string or an array of content parts, got ", type_name(content));
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object()) invalid_param(param, "parts must be objects, got ", type_name(part));
    Fields pf(part, param + "[].");
    const std::string type = pf.string("type", "");
    if (type != "text") invalid_param(param + "[].type", "only text parts are supported, got '", type, "'");
    text += pf.string("text", "");
  }
  return text;
}

ojson normalize_tool_calls(const ojson& calls, const std::string& param) {
  if (!calls.is_array()) invalid_param(param, "must be an array, got ", type_name(calls));
  ojson out = ojson::array();
  for (const auto& call : calls) {
    if (!call.is_object()) invalid_param(param, "entries must be objects, got ", type_name(call));
    const ojson* fn = Fields(call, param + "[].").get("function");
    if (fn == nullptr || !fn->is_object()) invalid_param(param + "[].function", "must be an object");
    Fields ff(*fn, param + "[].function.");
    const std::string name = ff.string("name", "");
    if (name.empty()) invalid_param(param + "[].function.name", "must be a non-empty string");
    // Templates print arguments with tojson: give them the object, not its JSON text.
    ojson args = ojson::object();
    if (const ojson* a = ff.get("arguments")) {
      if (a->is_string()) {
        // With the body's limits: the text is not covered by the body's depth check, and a
        // 4 MB "[[[[..." here was copied recursively below until the stack overflowed.
        try {
          args = parse_json_body(a->get<std::string>());
        } catch (const ApiError& e) {
          invalid_param(param + "[].function.arguments", "must be a JSON text (", e.what(), ")");
        }
      } else if (a->is_object()) {
        args = *a;
      } else {
        invalid_param(param + "[].function.arguments", "must be a string holding a JSON object");
      }
    }
    ojson entry = {{"id", Fields(call, "").string("id", "")}, {"type", "function"},
                   {"function", {{"name", name}, {"arguments", args}}}};
    out.push_back(entry);
  }
  return out;
}

void parse_messages(const ojson& body, GenerationRequest& r) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    invalid_param("messages", "must be a non-empty array of messages");
  if (it->size() > kMaxMessages) invalid_param("messages", "may hold at most ", kMaxMessages, " messages, got ", it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& m = (*it)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) invalid_param(at, "must be an object, got ", type_name(m));
    Fields mf(m, at + ".");
    const std::string role = mf.string("role", "");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      invalid_param(at + ".role", "must be one of system, developer, user, assistant, tool; got '", role, "'");
    ojson msg = ojson::object();
    msg["role"] = role == "developer" ? "system" : role;
    auto content = m.find("content");
    if (content == m.end() && role != "assistant") invalid_param(at + ".content", "is required");
    msg["content"] = content == m.end() ? ojson() : normalize_content(*content, at + ".content");
    if (role != "assistant" && msg["content"].is_null()) invalid_param(at + ".content", "must not be null");
    for (const char* key : {"reasoning_content", "reasoning", "name", "tool_call_id"})
      if (mf.get(key) != nullptr) msg[key] = mf.string(key, "");
    if (const ojson* calls = mf.get("tool_calls")) msg["tool_calls"] = normalize_tool_calls(*calls, at + ".tool_calls");
    r.messages.push_back(std::move(msg));
  }
}

void parse_tools(const ojson& body, GenerationRequest& r) {
  Fields f(body, "");
  if (const ojson* tools = f.get("tools")) {
    if (!tools->is_array()) invalid_param("tools", "must be an array, got ", type_name(*tools));
    if (tools->size() > kMaxTools) invalid_param("tools", "may hold at most ", kMaxTools, " tools, got ", tools->size());
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || Fields(t, at + ".").string("type", "function") != "function")
        invalid_param(at, "must be {\"type\": \"function\", \"function\": {...}}");
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) invalid_param(at + ".function", "must be an object");
      Fields ff(*fn, at + ".function.");
      const std::string name = ff.string("name", "");
      if (name.empty() || name.size() > kMaxToolNameBytes)
        invalid_param(at + ".function.name", "must be a non-empty string of at most ", kMaxToolNameBytes, " bytes");
      if (const ojson* p = ff.get("parameters"); p != nullptr && !p->is_object())
        invalid_param(at + ".function.parameters", "must be an object (a JSON schema)");
    }
    if (!tools->empty()) r.tools = *tools;
  }
  const ojson* choice = f.get("tool_choice");
  r.tool_choice = r.tools.is_null() ? ToolChoice::None : ToolChoice::Auto;
  if (choice == nullptr) return;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") r.tool_choice = ToolChoice::None;
    else if (c == "auto") r.tool_choice = ToolChoice::Auto;
    else if (c == "required") r.tool_choice = ToolChoice::Required;
    else invalid_param("tool_choice", "must be 'none', 'auto', 'required' or {\"type\": \"function\", ...}; got '", c, "'");
  } else if (choice->is_object()) {
    auto fn = choice->find("function");
    if (fn == choice->end() || !fn->is_object()) invalid_param("tool_choice.function", "must be an object with a name");
    r.tool_choice = ToolChoice::Named;
    r.tool_name = Fields(*fn, "tool_choice.function.").string("name", "");
  } else {
    invalid_param("tool_choice", "must be a string or an object, got ", type_name(*choice));
  }
  if (r.tool_choice != ToolChoice::None && r.tools.is_null())
    invalid_param("tool_choice", "needs 'tools' to choose from");
  if (r.tool_choice == ToolChoice::Named) {
    bool found = false;
    for (const auto& t : r.tools) found = found || t["function"].value("name", "") == r.tool_name;
    if (!found) invalid_param("tool_choice.function.name", "names no tool in 'tools': '", r.tool_name, "'");
  }
}

}  // namespace

ojson parse_json_body(std::string_view body, int max_depth) {
  // Depth first, without building anything: a 10 MB "[[[[..." must not recurse.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) throw ApiError(400, "invalid_request_error", detail::concat("JSON nested deeper than ", max_depth, " levels"));
    } else if (c == ']' || c == '}') --depth;
  }
  // Keys per object, counted while parsing: ordered_json finds a key by a linear scan, so one
  // object of n keys costs n^2 / 2 string compares (400k keys took 101 s).
  std::vector<int64_t> keys;  // per open object
  const auto count_keys = [&keys](int, ojson::parse_event_t event, ojson&) {
    if (event == ojson::parse_event_t::object_start) keys.push_back(0);
    else if (event == ojson::parse_event_t::object_end) keys.pop_back();
    else if (event == ojson::parse_event_t::key && ++keys.back() > kMaxObjectKeys)
      throw ApiError(400, "invalid_request_error", detail::concat("a JSON object holds more than ", kMaxObjectKeys, " keys"));
    return true;
  };
  try {
    return ojson::parse(body, count_keys);
  } catch (const ojson::exception& e) {
    throw ApiError(400, "invalid_request_error", std::string("malformed JSON body: ") + e.what());
  }
}

GenerationRequest parse_chat_request(const ojson& body) {
  GenerationRequest r;
  r.chat = true;
  parse_common(body, r);
  parse_messages(body, r);
  parse_tools(body, r);
  Fields f(body, "");
  const bool logprobs = f.boolean("logprobs", false);
  const int64_t top = f.integer("top_logprobs", 0, 0, 20);
  if (f.get("top_logprobs") != nullptr && !logprobs) invalid_param("top_logprobs", "needs 'logprobs': true");
  r.params.top_logprobs = logprobs ? static_cast<int32_t>(top) : -1;
  r.continue_final_message = f.boolean("continue_final_message", false);
  r.add_generation_prompt = f.boolean("add_generation_prompt", !r.continue_final_message);
  if (r.continue_final_message && r.add_generation_prompt)
    invalid_param("continue_final_message", "cannot be combined with add_generation_prompt");
  if (r.continue_final_message && r.messages.back()["role"] != "assistant")
    invalid_param("continue_final_message", "needs a final assistant message to continue");
  if (const ojson* kw = f.get("chat_template_kwargs")) {
    if (!kw->is_object()) invalid_param("chat_template_kwargs", "must be an object, got ", type_name(*kw));
    r.template_kwargs = *kw;
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
      if (kw->contains(reserved)) invalid_param(std::string("chat_template_kwargs.") + reserved, "is set by the server");
  }
  return r;
}

GenerationRequest parse_completion_request(const ojson& body) {
  GenerationRequest r;
  r.chat = false;
  parse_common(body, r);
  Fields f(body, "");
  const ojson* prompt = f.get("prompt");
  if (prompt == nullptr) invalid_param("prompt", "is required");
  // One prompt per request: a string, [string], or token ids [int, ...] / [[int, ...]].
  const ojson* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty()) {
    for (const auto& id : *p) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max())
        invalid_param("prompt", "must be a string or an array of token ids (one prompt per request)");
      r.prompt_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    r.prompt_is_ids = true;
  } else {
    invalid_param("prompt", "must be a non-empty string or array of token ids (one prompt per request)");
  }
  if (const ojson* lp = f.get("logprobs"); lp != nullptr && !lp->is_boolean())
    r.params.top_logprobs = static_cast<int32_t>(f.integer("logprobs", 0, 0, 20));
  else if (f.boolean("logprobs", false))
    r.params.top_logprobs = 0;
  r.echo = f.boolean("echo", false);
  if (f.get("suffix") != nullptr) invalid_param("suffix", "is not supported");
  return r;
}

}  // namespace zen::server
