// Splits Qwen3-style reasoning from the answer: "<think>reasoning</think>answer". Streaming:
// push() returns the newly decided reasoning and content text; a tag split across pushes is
// held until it completes. The prompt may already open the block (templates that end the
// generation prompt with "<think>\n"), then output starts inside the reasoning.
#pragma once
#include <string>
#include <string_view>

namespace zen::server {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  static constexpr std::string_view kOpen = "<think>";
  static constexpr std::string_view kClose = "</think>";

  explicit ReasoningParser(bool starts_in_reasoning);
  ReasoningSplit push(std::string_view text);
  ReasoningSplit flush();  // end of the stream: releases held text as it stands
  bool in_reasoning() const { return state_ == State::Reasoning; }

  // Whether a rendered prompt leaves a <think> block open (its last <think> is not closed).
  static bool prompt_opens_reasoning(std::string_view prompt);

 private:
  enum class State { Start, Reasoning, AfterReasoning, Content };
  State state_;
  std::string held_;
};

}  // namespace zen::server
