// OpenAI request bodies (chat completions and completions) parsed and validated into one
// GenerationRequest. Every rejection is an ApiError (400) naming the offending parameter.
// No HTTP here: the input is the body text.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "grammar/compile.h"

namespace zen::server {

using ojson = nlohmann::ordered_json;

enum class ToolChoice { Auto, None, Required, Named };

struct GenerationRequest {
  bool chat = true;            // /v1/chat/completions, else /v1/completions
  std::string model;           // as sent ("" when absent)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  RequestParams params;        // sampling, top_logprobs; max_tokens only when given
  bool max_tokens_given = false;
  int32_t n = 1;               // choices: independent samples of the same prompt
  static constexpr int32_t kMaxChoices = 16;
  std::vector<std::string> stop;
  // Constrained output asked by response_format, structured_outputs, guided_* (vLLM) or
  // grammar / json_schema (llama.cpp); compiled by the server (tool-call grammars too).
  std::optional<grammar::GrammarSpec> grammar;
  std::string grammar_param;  // the field that asked for it, named in errors
  std::string schema_name;    // response_format.json_schema.name
  // chat
  ojson messages = ojson::array();    // normalized for the chat template
  ojson tools;                        // null or a non-empty array
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_name;              // ToolChoice::Named
  ojson template_kwargs = ojson::object();
  bool add_generation_prompt = true;  // vLLM extensions: start a new assistant turn, or
  bool continue_final_message = false;  // continue the final (assistant) message's text
  // completions
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;    // when the prompt was given as token ids
  bool prompt_is_ids = false;
  bool echo = false;
};

// Parses a JSON body; rejects malformed JSON, invalid UTF-8 and nesting deeper than
// max_depth (400) before building a tree from it.
// An object of more than kMaxObjectKeys keys is refused the same way, while parsing.
inline constexpr int64_t kMaxObjectKeys = 10000;
// Request sizes past which a field is refused with a 400 naming it (the 8 MiB body bounds the
// rest): a probe's 100k-character tool name became a 12,622-token prompt.
inline constexpr size_t kMaxMessages = 10000, kMaxTools = 256, kMaxToolNameBytes = 256;
ojson parse_json_body(std::string_view body, int max_depth = 64);

GenerationRequest parse_chat_request(const ojson& body);
GenerationRequest parse_completion_request(const ojson& body);

}  // namespace zen::server
