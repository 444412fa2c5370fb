#include "tokenizer/chat_template.h"

#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_render.h"

namespace zen {

ChatTemplate::ChatTemplate(std::string source)
    : source_(std::move(source)), parsed_(jinja::parse_template(source_)) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return jinja::render(*parsed_, jinja::Value::from_json(context));
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return jinja::render(*parsed_, jinja::Value::from_json(context));
}

}  // namespace zen
