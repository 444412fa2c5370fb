// One generation request in flight, between the engine thread and the HTTP thread that
// answers it. The engine's callback only queues updates (engine callbacks must stay short);
// the HTTP thread pumps them through the OutputStream into SSE chunks or one JSON body.
// A stop string aborts the engine request at once; a client that went away aborts it too.
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

  // Engine thread: queue an update.
  void on_update(const RequestUpdate& u);
  // After Engine::add succeeded: how to abort the engine request.
  void set_abort(std::function<void()> abort) { abort_ = std::move(abort); }

  // HTTP thread: waits up to `wait` for updates and writes what they produce (or a keep-alive
  // when idle for long). Returns false when a write failed. done() once everything is written.
  bool pump(const Write& write, std::chrono::milliseconds wait);
  bool done() const { return done_; }
  // The connection ended before done(): abort the engine request.
  void client_gone();

 private:
  bool handle(const RequestUpdate& u, const Write& write);
  bool emit(const OutputDelta& d, const std::vector<GeneratedToken>& tokens, const Write& write);
  bool finish(const std::string& engine_reason, const std::string& error, const Write& write);
  std::string finish_reason(const std::string& engine_reason) const;
  ojson chunk_envelope() const;
  std::string sse(const ojson& j) const { return "data: " + to_text(j) + "\n\n"; }
  ojson final_body(const std::string& reason) const;

  const bool chat_, stream_, include_usage_, logprobs_, echo_;
  std::string prompt_text_;
  OutputStream out_;
  const Tokenizer& tok_;
  Metrics& metrics_;
  const std::string model_name_;
  const std::string id_;
  const int64_t created_;
  std::function<void()> abort_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestUpdate> queue_;

  // HTTP thread state.
  bool started_ = false, done_ = false, aborted_ = false;
  Usage usage_;
  int64_t tokens_seen_ = 0;
  Clock::time_point arrival_, last_token_, last_write_;
  bool have_last_token_ = false;
  int64_t text_offset_ = 0;
  // Non-streaming accumulation.
  std::string content_, reasoning_;
  std::vector<GeneratedToken> all_tokens_;
  struct CallAccum {
    std::string id, name, arguments;
  };
  std::map<int, CallAccum> calls_;
};

}  // namespace zen::server
