// Chat templates: renders a model's Jinja chat template exactly as HF transformers'
// apply_chat_template(..., tokenize=False) does (jinja2 with trim_blocks, lstrip_blocks,
// loopcontrols, the sandbox's immutability, transformers' tojson / raise_exception /
// strftime_now). The interpreter is in jinja_*.{h,cc}.
//
// Context: {"messages": [...], "tools": [...]?, "add_generation_prompt": bool,
//           "bos_token": str, "eos_token": str, "enable_thinking": bool?, ...any kwargs}
// As apply_chat_template does before rendering, message keys whose value is null are dropped,
// reasoning sent as reasoning_content / thinking / reasoning is copied to both
// "reasoning_content" and "thinking", and missing tools / documents / add_generation_prompt
// read as None / None / False.
// Key order matters for output (tojson prints dicts in insertion order, as Python does), so
// prefer the ordered_json overload; nlohmann::json sorts object keys.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace zen {

namespace jinja {
struct ParsedTemplate;
}

class ChatTemplate {
 public:
  // Parses; throws zen::Error naming line and column on malformed source.
  explicit ChatTemplate(std::string source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Throws zen::Error (with the template line) on runtime errors, including the template's
  // own raise_exception(message), whose message is kept.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::unique_ptr<jinja::ParsedTemplate> parsed_;
};

}  // namespace zen
