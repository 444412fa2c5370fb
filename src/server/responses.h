// OpenAI response objects: chat.completion(.chunk), text_completion, usage, logprobs.
// Text from the model may hold invalid UTF-8 (a token can be part of a character): every
// serialization replaces it with U+FFFD instead of failing.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/tool_parser.h"
#include "tokenizer/tokenizer.h"

namespace zen::server {

using ojson = nlohmann::ordered_json;

std::string to_text(const ojson& j);  // compact JSON, invalid UTF-8 replaced

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  // Speculative decoding: drafted tokens the target accepted / rejected (reported as OpenAI's
  // predicted-output counts in completion_tokens_details when anything was drafted).
  int64_t accepted_prediction_tokens = 0;
  int64_t rejected_prediction_tokens = 0;
};
ojson usage_json(const Usage& u);

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}
ojson chat_logprobs_json(const Tokenizer& tok, const std::vector<GeneratedToken>& tokens);
// Completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}
ojson completion_logprobs_json(const Tokenizer& tok, const std::vector<GeneratedToken>& tokens, int64_t first_offset);

// A streamed tool-call delta: id, type and name on a call's first delta, then arguments.
ojson tool_call_delta_json(const ToolCallDelta& d, const std::string& call_id);

std::string random_id(const std::string& prefix);  // "chatcmpl-" + 24 hex digits, etc.

}  // namespace zen::server
