#include "server/output_stream.h"

namespace zen::server {

OutputStream::OutputStream(const Tokenizer& tok, OutputOptions options)
    : tok_(tok), detok_(tok), stop_(std::move(options.stop)) {
  if (options.parse_reasoning) reasoning_.emplace(options.starts_in_reasoning);
  if (options.tool_format) {
    tools_.emplace(*options.tool_format, std::move(options.tools));
    tools_->accept_bare_json_calls(*options.tool_format == ToolCallFormat::Hermes && options.tool_prefill.empty());
    ToolParse p = tools_->push(options.tool_prefill);
    primed_.content = std::move(p.content);
    primed_.tool_calls = std::move(p.calls);
  }
}

OutputDelta OutputStream::push(const std::vector<GeneratedToken>& tokens) {
  OutputDelta out = std::move(primed_);
  primed_ = {};
  for (const GeneratedToken& t : tokens) {
    if (stop_.stopped()) break;
    // Control tokens (<|im_end|>, <|endoftext|>) end turns; they are not text.
    if (tok_.is_special(t.token)) continue;
    route_text(stop_.push(detok_.push(t.token)), out);
  }
  return out;
}

OutputDelta OutputStream::finish() {
  OutputDelta out = std::move(primed_);
  primed_ = {};
  if (!stop_.stopped()) route_text(stop_.push(detok_.flush()), out);
  route_text(stop_.flush(), out);
  if (reasoning_) route_split(reasoning_->flush(), out);
  if (tools_) {
    ToolParse p = tools_->flush();
    out.content += p.content;
    for (auto& c : p.calls) out.tool_calls.push_back(std::move(c));
  }
  return out;
}

void OutputStream::route_text(const std::string& text, OutputDelta& out) {
  if (text.empty()) return;
  if (reasoning_)
    route_split(reasoning_->push(text), out);
  else
    route_split({"", text}, out);
}

void OutputStream::route_split(ReasoningSplit split, OutputDelta& out) {
  out.reasoning += split.reasoning;
  if (split.content.empty()) return;
  if (!tools_) {
    out.content += split.content;
    return;
  }
  ToolParse p = tools_->push(split.content);
  out.content += p.content;
  for (auto& c : p.calls) out.tool_calls.push_back(std::move(c));
}

}  // namespace zen::server
