#include "template/chat_template.h"

#include "template/jinja_parser.h"
#include "template/jinja_render.h"

namespace zen {
namespace {

using jinja::DictData;
using jinja::Value;

// transformers' _normalize_chat_messages + _alias_reasoning_fields: message keys whose value
// is None are dropped, and reasoning sent as reasoning_content, thinking or reasoning (the
// first non-None, in that order) is copied to both "thinking" and "reasoning_content", i.e.
// {"thinking": r, **message, "reasoning_content": r} in Python dict order.
Value normalize_message(const Value& message) {
  if (!message.is_dict()) return message;
  auto kept = std::make_shared<DictData>();
  for (const auto& [key, item] : message.dict_data().entries)
    if (!item.is_none()) kept->entries.emplace_back(key, item);
  const Value* reasoning = nullptr;
  for (const char* field : {"reasoning_content", "thinking", "reasoning"})
    if (!reasoning) reasoning = kept->find(std::string(field));
  if (!reasoning) return Value::dict(std::move(kept));
  auto aliased = std::make_shared<DictData>();
  aliased->entries.emplace_back(Value::string("thinking"), *reasoning);
  for (const auto& [key, item] : kept->entries) aliased->set(key, item);
  aliased->set(Value::string("reasoning_content"), *reasoning);
  return Value::dict(std::move(aliased));
}

// The variables apply_chat_template gives a template: tools, documents and
// add_generation_prompt are always defined (None / False when not passed).
Value prepare_context(Value context) {
  if (!context.is_dict()) return context;  // render() reports it
  auto data = std::make_shared<DictData>(context.dict_data());
  if (const Value* messages = data->find(std::string("messages")); messages && messages->is_list()) {
    std::vector<Value> normalized;
    for (const auto& m : messages->items()) normalized.push_back(normalize_message(m));
    data->set(Value::string("messages"), Value::list(std::move(normalized)));
  }
  if (!data->find(std::string("tools"))) data->set(Value::string("tools"), Value::none());
  if (!data->find(std::string("documents"))) data->set(Value::string("documents"), Value::none());
  if (!data->find(std::string("add_generation_prompt")))
    data->set(Value::string("add_generation_prompt"), Value::boolean(false));
  return Value::dict(std::move(data));
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source)
    : source_(std::move(source)), parsed_(jinja::parse_template(source_)) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return jinja::render(*parsed_, prepare_context(Value::from_json(context)));
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return jinja::render(*parsed_, prepare_context(Value::from_json(context)));
}

}  // namespace zen
