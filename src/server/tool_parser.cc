#include "server/tool_parser.h"

#include "server/text_scan.h"

namespace zen::server {
namespace {

using nlohmann::json;

constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

bool all_space(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return false;
  return true;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && all_space(s.substr(b, 1))) ++b;
  while (e > b && all_space(s.substr(e - 1, 1))) --e;
  return std::string(s.substr(b, e - b));
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::Hermes;
  if (name == "qwen3_xml") return ToolCallFormat::Qwen3Xml;
  return std::nullopt;
}

std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template) {
  if (chat_template.find("<function=") != std::string_view::npos) return ToolCallFormat::Qwen3Xml;
  if (chat_template.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::Hermes;
  return std::nullopt;
}

void ToolParse::append(ToolParse&& other) {
  content += other.content;
  for (auto& c : other.calls) calls.push_back(std::move(c));
}

ToolCallParser::ToolCallParser(ToolCallFormat format, json tools) : format_(format), tools_(std::move(tools)) {}

ToolParse ToolCallParser::push(std::string_view text) {
  ToolParse out;
  if (bare_json_ok_ && !seen_text_ && !inside_ && calls_started_ == 0) {
    bare_.append(text);
    const size_t first = bare_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return out;
    seen_text_ = true;
    bare_json_ = bare_[first] == '{';
    if (!bare_json_) {
      text = "";
      held_ = std::move(bare_);
      bare_.clear();
    } else {
      return out;
    }
  } else if (bare_json_) {
    bare_.append(text);
    if (bare_.find(kOpen) == std::string::npos) return out;
    bare_json_ = false;  // tags after all: parse the held text the usual way
    held_ = std::move(bare_);
    bare_.clear();
    text = "";
  }
  (inside_ ? body_ : held_).append(text);
  for (;;) {
    if (!inside_) {
      const size_t open = held_.find(kOpen);
      if (open == std::string::npos) {
        const size_t keep = partial_tag_suffix(held_, kOpen);
        emit_content(held_.substr(0, held_.size() - keep), out);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      emit_content(held_.substr(0, open), out);
      body_ = held_.substr(open + kOpen.size());
      held_.clear();
      inside_ = true;
      body_pos_ = 0;
      function_name_.clear();
      params_emitted_ = 0;
      args_closed_ = false;
      continue;
    }
    const size_t close = body_.find(kClose);
    if (close == std::string::npos) {
      parse_body(false, out);
      return out;
    }
    std::string after = body_.substr(close + kClose.size());
    body_.resize(close);
    parse_body(true, out);
    inside_ = false;
    body_.clear();
    held_ = std::move(after);
  }
}

ToolParse ToolCallParser::flush() {
  ToolParse out;
  if (bare_json_ && bare_json_call(out)) return out;
  if (!bare_.empty()) {
    held_ = std::move(bare_) + held_;
    bare_.clear();
  }
  if (inside_) {
    if (format_ == ToolCallFormat::Hermes) parse_hermes(out, /*closed_by_model=*/false);
    else parse_body(true, out);
    inside_ = false;
    body_.clear();
  }
  emit_content(std::move(held_), out);
  held_.clear();
  pending_space_.clear();  // trailing whitespace after a call is not content
  return out;
}

bool ToolCallParser::bare_json_call(ToolParse& out) {
  json call = json::parse(bare_, nullptr, /*allow_exceptions=*/false);
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string() || !tools_.is_array()) return false;
  const std::string name = call["name"].get<std::string>();
  bool known = false;
  for (const json& t : tools_)
    known = known || (t.is_object() && t.contains("function") && t["function"].is_object() &&
                      t["function"].value("name", json()) == name);
  if (!known) return false;
  const json args = call.value("arguments", json::object());
  out.calls.push_back({calls_started_++, name, args.is_string() ? args.get<std::string>() : dump(args)});
  bare_.clear();
  bare_json_ = false;
  return true;
}

void ToolCallParser::emit_content(std::string text, ToolParse& out) {
  if (text.empty()) return;
  if (calls_started_ == 0) {
    out.content += text;
    return;
  }
  // Between and after calls, whitespace alone (the newline between two calls) is not content.
  if (all_space(text)) {
    pending_space_ += text;
    return;
  }
  out.content += pending_space_ + text;
  pending_space_.clear();
}

void ToolCallParser::parse_body(bool closed, ToolParse& out) {
  if (format_ == ToolCallFormat::Hermes) {
    if (closed) parse_hermes(out);
  } else {
    parse_xml(closed, out);
  }
}

void ToolCallParser::parse_hermes(ToolParse& out, bool closed_by_model) {
  json call = json::parse(body_, nullptr, /*allow_exceptions=*/false);
  if (call.is_object() && call.contains("name") && call["name"].is_string()) {
    const json args = call.value("arguments", json::object());
    out.calls.push_back({calls_started_++, call["name"].get<std::string>(), args.is_string() ? args.get<std::string>() : dump(args)});
    return;
  }
  if (all_space(body_)) return;  // an empty call (a forced opening the model closed at once)
  // Not a call we understand: the client sees the text as the model wrote it (a call cut by
  // max_tokens gets no closing tag it never wrote).
  emit_content(std::string(kOpen) + body_ + (closed_by_model ? std::string(kClose) : std::string()), out);
}

void ToolCallParser::parse_xml(bool closed, ToolParse& out) {
  for (;;) {
    const std::string_view rest = std::string_view(body_).substr(body_pos_);
    if (function_name_.empty()) {
      const size_t f = rest.find(kFunctionOpen);
      const size_t gt = f == std::string_view::npos ? f : rest.find('>', f);
      if (gt == std::string_view::npos) break;
      function_name_ = trim(rest.substr(f + kFunctionOpen.size(), gt - f - kFunctionOpen.size()));
      if (function_name_.empty()) function_name_ = "?";  // "<function=>": still a call, named oddly
      body_pos_ += gt + 1;
      out.calls.push_back({calls_started_++, function_name_, ""});
      continue;
    }
    if (args_closed_) break;
    const size_t param = rest.find(kParamOpen);
    const size_t fn_end = rest.find(kFunctionClose);
    if (param != std::string_view::npos && (fn_end == std::string_view::npos || param < fn_end)) {
      const size_t gt = rest.find('>', param);
      if (gt == std::string_view::npos) break;
      const std::string key = trim(rest.substr(param + kParamOpen.size(), gt - param - kParamOpen.size()));
      const size_t value_at = gt + 1;
      // The value ends at </parameter>; models sometimes skip it before the next tag.
      size_t end = rest.find(kParamClose, value_at);
      size_t next = end == std::string_view::npos ? end : end + kParamClose.size();
      for (std::string_view tag : {kParamOpen, kFunctionClose}) {
        const size_t at = rest.find(tag, value_at);
        if (at != std::string_view::npos && (end == std::string_view::npos || at < end)) end = next = at;
      }
      if (end == std::string_view::npos) {
        if (!closed) break;
        end = next = rest.size();
      }
      const std::string value(rest.substr(value_at, end - value_at));
      out.calls.push_back({calls_started_ - 1, "", std::string(params_emitted_ == 0 ? "{" : ", ") + dump(json(key)) + ": " + xml_value_json(key, value)});
      ++params_emitted_;
      body_pos_ += next;
      continue;
    }
    if (fn_end != std::string_view::npos) {
      out.calls.push_back({calls_started_ - 1, "", params_emitted_ == 0 ? "{}" : "}"});
      args_closed_ = true;
      body_pos_ += fn_end + kFunctionClose.size();
      continue;
    }
    break;
  }
  if (!closed) return;
  if (function_name_.empty()) {
    emit_content(std::string(kOpen) + body_ + std::string(kClose), out);
  } else if (!args_closed_) {
    out.calls.push_back({calls_started_ - 1, "", params_emitted_ == 0 ? "{}" : "}"});
    args_closed_ = true;
  }
}

std::string ToolCallParser::xml_value_json(const std::string& param, std::string value) const {
  // The format puts values on their own lines: "<parameter=k>\nvalue\n</parameter>".
  if (!value.empty() && value.front() == '\n') value.erase(0, 1);
  if (!value.empty() && value.back() == '\n') value.pop_back();
  // The schema says whether "42" means a number or the text "42"; unknown means text.
  std::string type = "string";
  if (tools_.is_array()) {
    for (const json& tool : tools_) {
      const json* fn = tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
      if (fn == nullptr || !fn->is_object() || fn->value("name", json()) != function_name_) continue;
      const json params = fn->value("parameters", json::object());
      if (!params.is_object() || !params.contains("properties") || !params["properties"].is_object()) break;
      const json& props = params["properties"];
      if (props.contains(param) && props[param].is_object() && props[param].contains("type") &&
          props[param]["type"].is_string())
        type = props[param]["type"].get<std::string>();
      break;
    }
  }
  if (type != "string") {
    json parsed = json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) return dump(parsed);
  }
  return dump(json(value));
}

}  // namespace zen::server
