// Tool calls in generated text, parsed while streaming. Two formats:
//   hermes     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>      (Qwen2.5, Qwen3)
//   qwen3_xml  <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
//              (Qwen3-Coder, Qwen3.5 / Zen6)
// Text outside the tags is content. A call's arguments reach the client as a JSON text, in
// pieces that concatenate to one JSON object (OpenAI's streaming tool-call deltas).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace zen::server {

enum class ToolCallFormat { Hermes, Qwen3Xml };
std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name);  // "hermes", "qwen3_xml"
// The format a chat template's instructions ask for; nullopt when it mentions no tool calls.
std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template);

struct ToolCallDelta {
  int index = 0;          // which call of this response (0, 1, ...)
  std::string name;       // set on the first delta of a call only
  std::string arguments;  // JSON text to append to the call's arguments
};

struct ToolParse {
  std::string content;
  std::vector<ToolCallDelta> calls;
  void append(ToolParse&& other);
};

class ToolCallParser {
 public:
  static constexpr std::string_view kOpen = "<tool_call>";
  static constexpr std::string_view kClose = "</tool_call>";

  // tools: the request's "tools" array (for parameter types in the xml format).
  ToolCallParser(ToolCallFormat format, nlohmann::json tools);
  ToolParse push(std::string_view text);
  ToolParse flush();  // end of stream: an unfinished call is closed or returned as content
  int calls_started() const { return calls_started_; }

  // Small models (Qwen2.5-Coder-0.5B) often answer a hermes tool prompt with the bare JSON
  // object and no tags. With this on, a response that starts with "{" is held to its end and
  // becomes a call when it is {"name": <a tool of the request>, "arguments": {...}}.
  void accept_bare_json_calls(bool on) { bare_json_ok_ = on; }

 private:
  // Inside a call: consume what body_ allows; `closed` tells that </tool_call> ended it.
  void parse_body(bool closed, ToolParse& out);
  void parse_hermes(ToolParse& out, bool closed_by_model = true);
  void parse_xml(bool closed, ToolParse& out);
  void emit_content(std::string text, ToolParse& out);
  std::string xml_value_json(const std::string& param, std::string value) const;

  ToolCallFormat format_;
  nlohmann::json tools_;
  bool inside_ = false;
  std::string held_;            // outside a call: text that may begin <tool_call>
  std::string body_;            // inside a call: text after <tool_call>
  size_t body_pos_ = 0;         // xml: how far body_ has been consumed
  std::string function_name_;   // xml: current call's name ("" before <function=...>)
  int params_emitted_ = 0;      // xml: parameters of the current call sent so far
  bool args_closed_ = false;    // xml: "}" sent
  int calls_started_ = 0;
  std::string pending_space_;   // whitespace after a call, emitted only if text follows
  bool bare_json_ok_ = false;
  bool seen_text_ = false;      // a non-space byte arrived (the bare-JSON decision is made)
  bool bare_json_ = false;      // holding a response that starts with "{"
  std::string bare_;            // the held response
  bool bare_json_call(ToolParse& out);
};

}  // namespace zen::server
