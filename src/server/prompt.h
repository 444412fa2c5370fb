// Request -> prompt token ids: the chat template of the model (with tools and the
// chat_template_kwargs), or a completions prompt as text or ids. tool_choice "required" and a
// named function are honoured by starting the assistant turn with the call's opening text,
// so the model can only continue a call (no constrained decoding needed).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "server/request.h"
#include "server/tool_parser.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace zen::server {

struct BuiltPrompt {
  std::string text;                 // rendered prompt ("" for token-id prompts)
  std::vector<int32_t> ids;
  bool starts_in_reasoning = false;  // the prompt leaves a <think> block open
  std::string tool_prefill;          // text already written into the assistant turn
};

class PromptBuilder {
 public:
  // tool_format: how this model writes tool calls (nullopt: tools are not supported).
  PromptBuilder(const Tokenizer& tok, std::optional<ToolCallFormat> tool_format);
  BuiltPrompt chat(const GenerationRequest& r) const;        // throws ApiError (400)
  BuiltPrompt completion(const GenerationRequest& r) const;  // throws ApiError (400)
  std::vector<int32_t> tokenize(const std::string& text, bool add_special) const;
  bool has_chat_template() const { return chat_template_.has_value(); }

 private:
  const Tokenizer& tok_;
  std::optional<ToolCallFormat> tool_format_;
  std::optional<ChatTemplate> chat_template_;
};

// The text that opens a forced tool call in this format ("" for ToolChoice::Auto/None).
std::string tool_call_prefill(ToolCallFormat format, ToolChoice choice, const std::string& name);

}  // namespace zen::server
