#include "server/generation.h"

#include <ctime>

namespace zen::server {

namespace {
constexpr auto kKeepAlive = std::chrono::milliseconds(500);
}

Generation::Generation(const GenerationRequest& request, const BuiltPrompt& prompt, OutputOptions output,
                       const Tokenizer& tok, Metrics& metrics, std::string model_name)
    : chat_(request.chat),
      stream_(request.stream),
      include_usage_(request.include_usage),
      logprobs_(request.params.top_logprobs >= 0),
      echo_(request.echo),
      prompt_text_(prompt.text),
      out_(tok, std::move(output)),
      tok_(tok),
      metrics_(metrics),
      model_name_(std::move(model_name)),
      id_(random_id(request.chat ? "chatcmpl-" : "cmpl-")),
      created_(static_cast<int64_t>(std::time(nullptr))),
      arrival_(Clock::now()),
      last_write_(Clock::now()) {
  usage_.prompt_tokens = static_cast<int64_t>(prompt.ids.size());
}

void Generation::on_update(const RequestUpdate& u) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(u);
  }
  cv_.notify_one();
}

void Generation::client_gone() {
  if (done_ || aborted_) return;
  aborted_ = true;
  if (abort_) abort_();
  metrics_.request_finished("abort", usage_.prompt_tokens, tokens_seen_,
                            std::chrono::duration<double>(Clock::now() - arrival_).count());
}

bool Generation::pump(const Write& write, std::chrono::milliseconds wait) {
  if (done_) return true;
  if (!started_) {
    started_ = true;
    if (stream_ && chat_) {
      ojson c = chunk_envelope();
      c["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
      if (!write(sse(c))) return false;
    } else if (stream_ && echo_) {
      ojson c = chunk_envelope();
      c["choices"][0]["text"] = prompt_text_;
      if (!write(sse(c))) return false;
    }
    last_write_ = Clock::now();
  }
  std::deque<RequestUpdate> updates;
  {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, wait, [&] { return !queue_.empty(); });
    updates.swap(queue_);
  }
  for (const RequestUpdate& u : updates) {
    if (!handle(u, write)) return false;
    if (done_) return true;
  }
  if (Clock::now() - last_write_ >= kKeepAlive) {
    // SSE comment / JSON whitespace: ignored by clients, and a closed connection shows up
    // as a failed write while the request still waits for its first token.
    if (!write(stream_ ? ": keep-alive\n\n" : " ")) return false;
    last_write_ = Clock::now();
  }
  return true;
}

bool Generation::handle(const RequestUpdate& u, const Write& write) {
  usage_.prompt_tokens = u.prompt_tokens;
  usage_.cached_tokens = u.cached_prompt_tokens;
  usage_.accepted_prediction_tokens = u.spec_accepted_tokens;
  usage_.rejected_prediction_tokens = u.spec_draft_tokens - u.spec_accepted_tokens;
  if (!u.tokens.empty()) {
    const auto now = Clock::now();
    if (!have_last_token_) {
      metrics_.first_token(u.first_token_seconds);
    } else {
      const auto n = static_cast<int64_t>(u.tokens.size());
      metrics_.inter_token(std::chrono::duration<double>(now - last_token_).count() / static_cast<double>(n), n);
    }
    have_last_token_ = true;
    last_token_ = now;
  }
  // Tokens up to the one that completes a stop string count; later ones were never shown.
  std::vector<GeneratedToken> shown;
  OutputDelta delta;
  for (const GeneratedToken& g : u.tokens) {
    if (out_.stop_string_hit()) break;
    ++tokens_seen_;
    shown.push_back(g);
    OutputDelta d = out_.push({g});
    delta.content += d.content;
    delta.reasoning += d.reasoning;
    for (auto& c : d.tool_calls) delta.tool_calls.push_back(std::move(c));
  }
  if (out_.stop_string_hit()) {
    if (abort_) abort_();
    OutputDelta rest = out_.finish();
    delta.content += rest.content;
    delta.reasoning += rest.reasoning;
    for (auto& c : rest.tool_calls) delta.tool_calls.push_back(std::move(c));
    if (!emit(delta, shown, write)) return false;
    return finish("stop", "", write);
  }
  if (u.finished) {
    OutputDelta rest = out_.finish();
    delta.content += rest.content;
    delta.reasoning += rest.reasoning;
    for (auto& c : rest.tool_calls) delta.tool_calls.push_back(std::move(c));
    if (!emit(delta, shown, write)) return false;
    return finish(u.finish_reason, u.error, write);
  }
  return emit(delta, shown, write);
}

bool Generation::emit(const OutputDelta& d, const std::vector<GeneratedToken>& tokens, const Write& write) {
  for (const ToolCallDelta& c : d.tool_calls) {
    CallAccum& a = calls_[c.index];
    if (!c.name.empty()) {
      a.id = random_id("call_");
      a.name = c.name;
    }
    a.arguments += c.arguments;
  }
  if (!stream_) {
    content_ += d.content;
    reasoning_ += d.reasoning;
    if (logprobs_) all_tokens_.insert(all_tokens_.end(), tokens.begin(), tokens.end());
    return true;
  }
  const bool with_logprobs = logprobs_ && !tokens.empty();
  if (d.empty() && !with_logprobs) return true;
  ojson c = chunk_envelope();
  ojson& choice = c["choices"][0];
  if (chat_) {
    ojson delta = ojson::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const ToolCallDelta& t : d.tool_calls) calls.push_back(tool_call_delta_json(t, calls_[t.index].id));
      delta["tool_calls"] = calls;
    }
    choice["delta"] = delta;
    if (with_logprobs) choice["logprobs"] = chat_logprobs_json(tok_, tokens);
  } else {
    choice["text"] = d.content;
    if (with_logprobs) choice["logprobs"] = completion_logprobs_json(tok_, tokens, text_offset_);
  }
  for (const GeneratedToken& g : tokens) text_offset_ += static_cast<int64_t>(tok_.token_bytes(g.token).size());
  last_write_ = Clock::now();
  return write(sse(c));
}

std::string Generation::finish_reason(const std::string& engine_reason) const {
  if (engine_reason == "stop" && out_.tool_calls() > 0) return "tool_calls";
  return engine_reason;
}

bool Generation::finish(const std::string& engine_reason, const std::string& error, const Write& write) {
  done_ = true;
  usage_.completion_tokens = tokens_seen_;
  const std::string reason = finish_reason(engine_reason);
  metrics_.request_finished(reason, usage_.prompt_tokens, usage_.completion_tokens,
                            std::chrono::duration<double>(Clock::now() - arrival_).count());
  if (reason == "error") {
    const ojson e = {{"error", {{"message", "generation failed: " + error}, {"type", "server_error"}, {"param", nullptr}, {"code", 500}}}};
    return write(stream_ ? sse(e) + "data: [DONE]\n\n" : to_text(e));
  }
  if (!stream_) return write(to_text(final_body(reason)));
  ojson c = chunk_envelope();
  if (chat_) c["choices"][0]["delta"] = ojson::object();
  else c["choices"][0]["text"] = "";
  c["choices"][0]["finish_reason"] = reason;
  std::string text = sse(c);
  if (include_usage_) {
    ojson u = chunk_envelope();
    u["choices"] = ojson::array();
    u["usage"] = usage_json(usage_);
    text += sse(u);
  }
  text += "data: [DONE]\n\n";
  return write(text);
}

ojson Generation::chunk_envelope() const {
  ojson choice = {{"index", 0}};
  if (chat_) choice["delta"] = ojson::object();
  else choice["text"] = "";
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return {{"id", id_}, {"object", chat_ ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
          {"model", model_name_}, {"choices", ojson::array({choice})}};
}

ojson Generation::final_body(const std::string& reason) const {
  ojson choice = {{"index", 0}};
  if (chat_) {
    ojson message = {{"role", "assistant"}, {"content", nullptr}};
    if (!content_.empty() || calls_.empty()) message["content"] = content_;
    if (!reasoning_.empty()) message["reasoning_content"] = reasoning_;
    if (!calls_.empty()) {
      ojson calls = ojson::array();
      for (const auto& [index, c] : calls_)
        calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      message["tool_calls"] = calls;
    }
    choice["message"] = message;
    choice["logprobs"] = logprobs_ ? chat_logprobs_json(tok_, all_tokens_) : ojson();
  } else {
    choice["text"] = (echo_ ? prompt_text_ : "") + content_;
    choice["logprobs"] = logprobs_ ? completion_logprobs_json(tok_, all_tokens_, 0) : ojson();
  }
  choice["finish_reason"] = reason;
  return {{"id", id_}, {"object", chat_ ? "chat.completion" : "text_completion"}, {"created", created_},
          {"model", model_name_}, {"choices", ojson::array({choice})}, {"usage", usage_json(usage_)}};
}

}  // namespace zen::server
