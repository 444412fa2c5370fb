// One generation request in flight, between the engine thread and the HTTP thread that
// answers it. The engine's callback only queues updates (engine callbacks must stay short);
// the HTTP thread pumps them through the OutputStream into SSE chunks or one JSON body.
// A stop string aborts the engine request at once; a client that went away aborts it too.
// With n > 1 (OpenAI's n) each choice is its own engine request sharing the prompt (its KV
// blocks through the prefix cache: the scheduler prefills the prompt once, the other choices
// wait for its blocks); they stream interleaved, by index, and usage sums them.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/output_stream.h"
#include "server/prompt.h"
#include "server/request.h"
#include "server/responses.h"

namespace zen::server {

class Generation {
 public:
  using Write = std::function<bool(const std::string&)>;  // false: the client is gone
  using Clock = std::chrono::steady_clock;

  Generation(const GenerationRequest& request, const BuiltPrompt& prompt, OutputOptions output,
             const Tokenizer& tok, Metrics& metrics, std::string model_name);

  // Engine thread: queue an update of choice `index`.
  void on_update(const RequestUpdate& u, int index = 0);
  // After Engine::add succeeded: how to abort choice `index`'s engine request.
  void set_abort(std::function<void()> abort, int index = 0) { choices_.at(static_cast<size_t>(index)).abort = std::move(abort); }
  int num_choices() const { return static_cast<int>(choices_.size()); }

  // HTTP thread: waits up to `wait` for updates and writes what they produce (or a keep-alive
  // when idle for long). Returns false when a write failed. done() once everything is written.
  bool pump(const Write& write, std::chrono::milliseconds wait);
  bool done() const { return done_; }
  // The connection ended before done(): abort the engine requests.
  void client_gone();

 private:
  struct CallAccum {
    std::string id, name, arguments;
  };
  // One choice's state on the HTTP thread.
  struct Choice {
    explicit Choice(const Tokenizer& tok, OutputOptions o) : out(tok, std::move(o)) {}
    OutputStream out;
    std::function<void()> abort;
    bool done = false;
    std::string reason;  // finish_reason once done
    int64_t tokens_seen = 0, prompt_tokens = 0, cached_tokens = 0, drafted = 0, accepted = 0;
    int64_t text_offset = 0;
    std::string content, reasoning;  // non-streaming accumulation
    std::vector<GeneratedToken> all_tokens;
    std::map<int, CallAccum> calls;
  };
  bool handle(Choice& c, int index, const RequestUpdate& u, const Write& write);
  bool emit(Choice& c, int index, const OutputDelta& d, const std::vector<GeneratedToken>& tokens, const Write& write);
  bool finish(Choice& c, int index, const std::string& engine_reason, const std::string& error, const Write& write);
  std::string finish_reason(const Choice& c, const std::string& engine_reason) const;
  ojson chunk_envelope(int index) const;
  std::string sse(const ojson& j) const { return "data: " + to_text(j) + "\n\n"; }
  ojson final_body() const;
  Usage total_usage() const;

  const bool chat_, stream_, include_usage_, logprobs_, echo_;
  std::string prompt_text_;
  const Tokenizer& tok_;
  Metrics& metrics_;
  const std::string model_name_;
  const std::string id_;
  const int64_t created_;
  std::vector<Choice> choices_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int, RequestUpdate>> queue_;

  // HTTP thread state.
  bool started_ = false, done_ = false, aborted_ = false;
  int64_t prompt_tokens_ = 0;
  Clock::time_point arrival_, last_token_, last_write_;
  bool have_last_token_ = false;
  std::string error_;  // the first choice that failed fails the request
};

}  // namespace zen::server
