#include "server/responses.h"

#include <random>

namespace zen::server {

std::string to_text(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson usage_json(const Usage& u) {
  ojson j = {{"prompt_tokens", u.prompt_tokens},
             {"completion_tokens", u.completion_tokens},
             {"total_tokens", u.prompt_tokens + u.completion_tokens},
             {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.accepted_prediction_tokens + u.rejected_prediction_tokens > 0)
    j["completion_tokens_details"] = {{"accepted_prediction_tokens", u.accepted_prediction_tokens},
                                      {"rejected_prediction_tokens", u.rejected_prediction_tokens}};
  return j;
}

namespace {

ojson token_entry(const Tokenizer& tok, int32_t id, float logprob) {
  const std::string text = tok.token_bytes(id);
  ojson bytes = ojson::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return {{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
}

}  // namespace

ojson chat_logprobs_json(const Tokenizer& tok, const std::vector<GeneratedToken>& tokens) {
  ojson content = ojson::array();
  for (const GeneratedToken& g : tokens) {
    ojson e = token_entry(tok, g.token, g.logprob);
    ojson top = ojson::array();
    for (const TokenLogprob& t : g.top) top.push_back(token_entry(tok, t.token, t.logprob));
    e["top_logprobs"] = top;
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

ojson completion_logprobs_json(const Tokenizer& tok, const std::vector<GeneratedToken>& tokens, int64_t first_offset) {
  ojson texts = ojson::array(), logprobs = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  int64_t offset = first_offset;
  for (const GeneratedToken& g : tokens) {
    const std::string text = tok.token_bytes(g.token);
    texts.push_back(text);
    logprobs.push_back(g.logprob);
    ojson top = ojson::object();
    for (const TokenLogprob& t : g.top) top[tok.token_bytes(t.token)] = t.logprob;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += static_cast<int64_t>(text.size());
  }
  return {{"tokens", texts}, {"token_logprobs", logprobs}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

ojson tool_call_delta_json(const ToolCallDelta& d, const std::string& call_id) {
  ojson j = {{"index", d.index}};
  if (!d.name.empty()) {
    j["id"] = call_id;
    j["type"] = "function";
    j["function"] = {{"name", d.name}, {"arguments", d.arguments}};
  } else {
    j["function"] = {{"arguments", d.arguments}};
  }
  return j;
}

std::string random_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kHex[rng() % 16];
  return id;
}

}  // namespace zen::server
