#include "server/prompt.h"

#include "server/api_error.h"
#include "server/reasoning_parser.h"

namespace zen::server {

std::string tool_call_prefill(ToolCallFormat format, ToolChoice choice, const std::string& name) {
  if (choice == ToolChoice::Required) return "<tool_call>\n";
  if (choice != ToolChoice::Named) return "";
  const std::string quoted = nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return format == ToolCallFormat::Hermes ? "<tool_call>\n{\"name\": " + quoted + ", \"arguments\": "
                                          : "<tool_call>\n<function=" + name + ">\n";
}

PromptBuilder::PromptBuilder(const Tokenizer& tok, std::optional<ToolCallFormat> tool_format)
    : tok_(tok), tool_format_(tool_format) {
  if (!tok.chat_template().empty()) chat_template_.emplace(tok.chat_template());
}

std::vector<int32_t> PromptBuilder::tokenize(const std::string& text, bool add_special) const {
  // Chat templates usually write the BOS text themselves; then it is not added twice.
  return tok_.encode(text, /*parse_special=*/true, add_special && !tok_.starts_with_bos_text(text));
}

BuiltPrompt PromptBuilder::chat(const GenerationRequest& r) const {
  if (!chat_template_) throw ApiError(400, "invalid_request_error", "this model has no chat template; use /v1/completions");
  const bool use_tools = !r.tools.is_null() && r.tool_choice != ToolChoice::None;
  if (use_tools && !tool_format_)
    invalid_param("tools", "this server has no tool-call parser for this model (start it with --tool-call-parser)");
  ojson ctx = ojson::object();
  ctx["messages"] = r.messages;
  if (use_tools) ctx["tools"] = r.tools;
  ctx["add_generation_prompt"] = r.add_generation_prompt;
  ctx["bos_token"] = tok_.bos_token();
  ctx["eos_token"] = tok_.eos_token();
  for (const auto& [key, value] : r.template_kwargs.items()) ctx[key] = value;
  BuiltPrompt p;
  try {
    p.text = chat_template_->render(ctx);
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", std::string("chat template: ") + e.what(), "messages");
  }
  if (r.continue_final_message) {
    // The template closes the final message ("...<|im_end|>\n"): cut right after its text.
    const ojson& last = r.messages.back()["content"];
    const std::string text = last.is_string() ? last.get<std::string>() : "";
    const size_t at = text.empty() ? std::string::npos : p.text.rfind(text);
    if (at == std::string::npos)
      invalid_param("continue_final_message", "the chat template does not write the final message's text verbatim");
    p.text.resize(at + text.size());
  }
  p.starts_in_reasoning = ReasoningParser::prompt_opens_reasoning(p.text);
  if (use_tools) {
    p.tool_prefill = tool_call_prefill(*tool_format_, r.tool_choice, r.tool_name);
    if (!p.tool_prefill.empty() && p.starts_in_reasoning) {
      p.text += "\n</think>\n\n";  // a forced call comes right away, without reasoning
      p.starts_in_reasoning = false;
    }
    p.text += p.tool_prefill;
  }
  p.ids = tokenize(p.text, true);
  return p;
}

BuiltPrompt PromptBuilder::completion(const GenerationRequest& r) const {
  BuiltPrompt p;
  if (r.prompt_is_ids) {
    for (int32_t id : r.prompt_ids)
      if (id >= tok_.vocab_size()) invalid_param("prompt", "token id ", id, " is outside the vocabulary (", tok_.vocab_size(), ")");
    p.ids = r.prompt_ids;
    p.text = tok_.decode(p.ids);
  } else {
    p.text = r.prompt_text;
    p.ids = tokenize(p.text, true);
  }
  if (p.ids.empty()) invalid_param("prompt", "must not be empty");
  return p;
}

}  // namespace zen::server
