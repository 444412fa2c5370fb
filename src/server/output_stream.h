// Generated tokens -> what a client sees, incrementally: text (UTF-8 safe), cut at the first
// stop string, split into reasoning and content, content split into text and tool calls.
//   tokens -> StreamingDetokenizer -> StopStringMatcher -> ReasoningParser -> ToolCallParser
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/reasoning_parser.h"
#include "server/stop_strings.h"
#include "server/tool_parser.h"
#include "tokenizer/tokenizer.h"

namespace zen::server {

struct OutputOptions {
  std::vector<std::string> stop;
  bool parse_reasoning = false;
  bool starts_in_reasoning = false;
  std::optional<ToolCallFormat> tool_format;  // nullopt: no tool-call parsing
  nlohmann::json tools;
  std::string tool_prefill;                   // the forced opening of a call, already in the prompt
};

struct OutputDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

class OutputStream {
 public:
  OutputStream(const Tokenizer& tok, OutputOptions options);
  // Tokens after a stop string was hit are ignored (the caller aborts the request).
  OutputDelta push(const std::vector<GeneratedToken>& tokens);
  OutputDelta finish();  // end of generation: flushes every stage
  bool stop_string_hit() const { return stop_.stopped(); }
  int tool_calls() const { return tools_ ? tools_->calls_started() : 0; }

 private:
  void route_text(const std::string& text, OutputDelta& out);  // after the stop matcher
  void route_split(ReasoningSplit split, OutputDelta& out);
  const Tokenizer& tok_;
  StreamingDetokenizer detok_;
  StopStringMatcher stop_;
  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
  OutputDelta primed_;  // what the tool prefill produced, sent with the first delta
};

}  // namespace zen::server
