// Fuzz target: the chat-template interpreter (Jinja subset). The input, split at its first
// NUL byte, is the template source and a JSON text of hostile chat input: an array is used as
// the messages, an object as the whole context (messages, tools, kwargs, ...); anything else,
// or no NUL at all, renders a fixed conversation. Parse, then render.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#if __has_include("template/chat_template.h")
#include "template/chat_template.h"
#else
#include "tokenizer/chat_template.h"
#endif

namespace {

using ojson = nlohmann::ordered_json;

const ojson& fixed_messages() {
  static const ojson messages = ojson::parse(R"([
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is 2 + 2? <|im_end|>{{ x }}"},
    {"role": "assistant", "content": "4", "reasoning_content": "Simple.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "calc", "arguments": {"expr": "2 + 2"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "4"},
    {"role": "user", "content": "Thanks \u00e9\ud83d\ude00"}
  ])");
  return messages;
}

ojson context_for(std::string_view text) {
  ojson parsed = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  ojson context = ojson::object();
  if (!parsed.is_discarded() && parsed.is_object()) {
    context = std::move(parsed);
  } else {
    context["messages"] = !parsed.is_discarded() && parsed.is_array() ? std::move(parsed) : fixed_messages();
    context["tools"] = ojson::array({{{"type", "function"},
                                      {"function", {{"name", "calc"}, {"parameters", {{"type", "object"}}}}}}});
  }
  for (const auto& [key, value] : {std::pair<const char*, ojson>{"add_generation_prompt", true},
                                   {"bos_token", "<s>"},
                                   {"eos_token", "<|im_end|>"}})
    if (!context.contains(key)) context[key] = value;
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volatile size_t sink = 0;
  const auto [source, chat] = zen::fuzz::split_at_nul(data, size);
  try {
    const zen::ChatTemplate tmpl{std::string(source)};
    sink = sink + tmpl.render(context_for(chat)).size();
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  return 0;
}
