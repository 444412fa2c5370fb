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
      tok_(tok),
      metrics_(metrics),
      model_name_(std::move(model_name)),
      id_(random_id(request.chat ? "chatcmpl-" : "cmpl-")),
      created_(static_cast<int64_t>(std::time(nullptr))),
      arrival_(Clock::now()),
      last_write_(Clock::now()) {
  prompt_tokens_ = static_cast<int64_t>(prompt.ids.size());
  choices_.reserve(static_cast<size_t>(std::max(1, request.n)));
  for (int i = 0; i < std::max(1, request.n); ++i) choices_.emplace_back(tok, output);
}

void Generation::on_update(const RequestUpdate& u, int index) {
  {
    std::lock_guard lock(mu_);
    queue_.emplace_back(index, u);
  }
  cv_.notify_one();
}

void Generation::client_gone() {
  if (done_ || aborted_) return;
  aborted_ = true;
  for (Choice& c : choices_) {
    if (c.done) continue;
    if (c.abort) c.abort();
    metrics_.request_finished("abort", prompt_tokens_, c.tokens_seen, std::chrono::duration<double>(Clock::now() - arrival_).count());
  }
}

bool Generation::pump(const Write& write, std::chrono::milliseconds wait) {
  if (done_) return true;
  if (!started_) {
    started_ = true;
    for (int i = 0; i < num_choices(); ++i) {
      if (stream_ && chat_) {
        ojson c = chunk_envelope(i);
        c["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
        if (!write(sse(c))) return false;
      } else if (stream_ && echo_) {
        ojson c = chunk_envelope(i);
        c["choices"][0]["text"] = prompt_text_;
        if (!write(sse(c))) return false;
      }
    }
    last_write_ = Clock::now();
  }
  std::deque<std::pair<int, RequestUpdate>> updates;
  {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, wait, [&] { return !queue_.empty(); });
    updates.swap(queue_);
  }
  for (const auto& [index, u] : updates) {
    Choice& c = choices_.at(static_cast<size_t>(index));
    if (c.done) continue;  // e.g. the engine's abort after a stop string
    if (!handle(c, index, u, write)) return false;
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

bool Generation::handle(Choice& c, int index, const RequestUpdate& u, const Write& write) {
  c.prompt_tokens = u.prompt_tokens;
  c.cached_tokens = u.cached_prompt_tokens;
  c.accepted = u.spec_accepted_tokens;
  c.drafted = u.spec_draft_tokens;
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
  auto add = [&delta](OutputDelta d) {
    delta.content += d.content;
    delta.reasoning += d.reasoning;
    for (auto& t : d.tool_calls) delta.tool_calls.push_back(std::move(t));
  };
  for (const GeneratedToken& g : u.tokens) {
    if (c.out.stop_string_hit()) break;
    ++c.tokens_seen;
    shown.push_back(g);
    add(c.out.push({g}));
  }
  if (c.out.stop_string_hit()) {
    if (c.abort) c.abort();
    add(c.out.finish());
    if (!emit(c, index, delta, shown, write)) return false;
    return finish(c, index, "stop", "", write);
  }
  if (u.finished) {
    add(c.out.finish());
    if (!emit(c, index, delta, shown, write)) return false;
    return finish(c, index, u.finish_reason, u.error, write);
  }
  return emit(c, index, delta, shown, write);
}

bool Generation::emit(Choice& ch, int index, const OutputDelta& d, const std::vector<GeneratedToken>& tokens, const Write& write) {
  for (const ToolCallDelta& t : d.tool_calls) {
    CallAccum& a = ch.calls[t.index];
    if (!t.name.empty()) {
      a.id = random_id("call_");
      a.name = t.name;
    }
    a.arguments += t.arguments;
  }
  if (!stream_) {
    ch.content += d.content;
    ch.reasoning += d.reasoning;
    if (logprobs_) ch.all_tokens.insert(ch.all_tokens.end(), tokens.begin(), tokens.end());
    return true;
  }
  const bool with_logprobs = logprobs_ && !tokens.empty();
  if (d.empty() && !with_logprobs) return true;
  ojson c = chunk_envelope(index);
  ojson& choice = c["choices"][0];
  if (chat_) {
    ojson delta = ojson::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const ToolCallDelta& t : d.tool_calls) calls.push_back(tool_call_delta_json(t, ch.calls[t.index].id));
      delta["tool_calls"] = calls;
    }
    choice["delta"] = delta;
    if (with_logprobs) choice["logprobs"] = chat_logprobs_json(tok_, tokens);
  } else {
    choice["text"] = d.content;
    if (with_logprobs) choice["logprobs"] = completion_logprobs_json(tok_, tokens, ch.text_offset);
  }
  for (const GeneratedToken& g : tokens) ch.text_offset += static_cast<int64_t>(tok_.token_bytes(g.token).size());
  last_write_ = Clock::now();
  return write(sse(c));
}

std::string Generation::finish_reason(const Choice& c, const std::string& engine_reason) const {
  if (engine_reason == "stop" && c.out.tool_calls() > 0) return "tool_calls";
  return engine_reason;
}

Usage Generation::total_usage() const {
  Usage u;
  u.prompt_tokens = prompt_tokens_;
  for (const Choice& c : choices_) {
    if (c.prompt_tokens > 0) u.prompt_tokens = c.prompt_tokens;  // the same prompt for each
    u.cached_tokens = std::max(u.cached_tokens, c.cached_tokens);
    u.completion_tokens += c.tokens_seen;
    u.accepted_prediction_tokens += c.accepted;
    u.rejected_prediction_tokens += c.drafted - c.accepted;
  }
  return u;
}

bool Generation::finish(Choice& c, int index, const std::string& engine_reason, const std::string& error, const Write& write) {
  c.done = true;
  c.reason = finish_reason(c, engine_reason);
  metrics_.request_finished(c.reason, prompt_tokens_, c.tokens_seen, std::chrono::duration<double>(Clock::now() - arrival_).count());
  if (c.reason == "error" && error_.empty()) error_ = error.empty() ? "unknown error" : error;
  bool all = true;
  for (const Choice& other : choices_) all = all && other.done;
  if (!error_.empty()) {
    // One failed choice fails the request: the others are stopped.
    for (Choice& other : choices_)
      if (!other.done && other.abort) other.abort();
    done_ = true;
    const ojson e = {{"error", {{"message", "generation failed: " + error_}, {"type", "server_error"}, {"param", nullptr}, {"code", 500}}}};
    return write(stream_ ? sse(e) + "data: [DONE]\n\n" : to_text(e));
  }
  std::string text;
  if (stream_) {
    ojson chunk = chunk_envelope(index);
    if (chat_) chunk["choices"][0]["delta"] = ojson::object();
    else chunk["choices"][0]["text"] = "";
    chunk["choices"][0]["finish_reason"] = c.reason;
    text = sse(chunk);
  }
  if (!all) return text.empty() || write(text);
  done_ = true;
  if (!stream_) return write(to_text(final_body()));
  if (include_usage_) {
    ojson u = chunk_envelope(0);
    u["choices"] = ojson::array();
    u["usage"] = usage_json(total_usage());
    text += sse(u);
  }
  text += "data: [DONE]\n\n";
  return write(text);
}

ojson Generation::chunk_envelope(int index) const {
  ojson choice = {{"index", index}};
  if (chat_) choice["delta"] = ojson::object();
  else choice["text"] = "";
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return {{"id", id_}, {"object", chat_ ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
          {"model", model_name_}, {"choices", ojson::array({choice})}};
}

ojson Generation::final_body() const {
  ojson choices = ojson::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    ojson choice = {{"index", i}};
    if (chat_) {
      ojson message = {{"role", "assistant"}, {"content", nullptr}};
      if (!c.content.empty() || c.calls.empty()) message["content"] = c.content;
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (!c.calls.empty()) {
        ojson calls = ojson::array();
        for (const auto& [index, call] : c.calls)
          calls.push_back({{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        message["tool_calls"] = calls;
      }
      choice["message"] = message;
      choice["logprobs"] = logprobs_ ? chat_logprobs_json(tok_, c.all_tokens) : ojson();
    } else {
      choice["text"] = (echo_ ? prompt_text_ : "") + c.content;
      choice["logprobs"] = logprobs_ ? completion_logprobs_json(tok_, c.all_tokens, 0) : ojson();
    }
    choice["finish_reason"] = c.reason;
    choices.push_back(std::move(choice));
  }
  return {{"id", id_}, {"object", chat_ ? "chat.completion" : "text_completion"}, {"created", created_},
          {"model", model_name_}, {"choices", choices}, {"usage", usage_json(total_usage())}};
}

}  // namespace zen::server
