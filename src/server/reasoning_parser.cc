#include "server/reasoning_parser.h"

#include "server/text_scan.h"

namespace zen::server {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view skip_spaces(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return s.substr(i);
}

}  // namespace

ReasoningParser::ReasoningParser(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::Reasoning : State::Start) {}

bool ReasoningParser::prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kClose);
  return close == std::string_view::npos || close < open;
}

ReasoningSplit ReasoningParser::push(std::string_view text) {
  ReasoningSplit out;
  held_.append(text);
  // Loop: one push may cross several states ("<think>a</think>b" in one piece).
  for (;;) {
    switch (state_) {
      case State::Start: {
        // Only a <think> at the very start (after whitespace) opens reasoning.
        const std::string_view rest = skip_spaces(held_);
        if (rest.empty() || (rest.size() < kOpen.size() && may_start_with(rest, kOpen))) return out;
        if (rest.substr(0, kOpen.size()) == kOpen) {
          held_.erase(0, held_.size() - rest.size() + kOpen.size());
          state_ = State::Reasoning;
        } else {
          state_ = State::Content;
        }
        continue;
      }
      case State::Reasoning: {
        const size_t close = held_.find(kClose);
        if (close == std::string::npos) {
          const size_t keep = partial_tag_suffix(held_, kClose);
          out.reasoning += held_.substr(0, held_.size() - keep);
          held_.erase(0, held_.size() - keep);
          return out;
        }
        out.reasoning += held_.substr(0, close);
        held_.erase(0, close + kClose.size());
        state_ = State::AfterReasoning;
        continue;
      }
      case State::AfterReasoning: {
        // The answer follows "</think>\n\n": the blank lines belong to neither part.
        const std::string_view rest = skip_spaces(held_);
        if (rest.empty()) {
          held_.clear();
          return out;
        }
        held_.erase(0, held_.size() - rest.size());
        state_ = State::Content;
        continue;
      }
      case State::Content:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ReasoningSplit ReasoningParser::flush() {
  ReasoningSplit out;
  if (state_ == State::Reasoning)
    out.reasoning = held_;
  else if (state_ != State::AfterReasoning)
    out.content = held_;
  held_.clear();
  return out;
}

}  // namespace zen::server
