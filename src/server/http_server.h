// The OpenAI-compatible HTTP server over an Engine:
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
//   GET /metrics, POST /tokenize, POST /detokenize, GET / (the chat page).
// Handlers never let an exception escape: every bad request becomes an OpenAI error object.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "server/tool_parser.h"
#include "tokenizer/tokenizer.h"

namespace zen::server {

// The weights' canonical root (src/attest) for /v1/models, filled in once known.
struct WeightsIdentity {
  std::mutex mu;
  std::string root;        // hex; empty until computed
  bool verified = false;   // checked against --verify-weights before loading
  std::string error;       // why it could not be computed
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;                       // 0: any free port (see Server::port())
  std::string model_name = "default";     // what /v1/models lists and requests may name
  std::string api_key;                    // non-empty: /v1/*, /tokenize and /metrics need "Bearer KEY"
  bool open_metrics = false;              // /metrics without the key (a scraper on a trusted net)
  bool parse_reasoning = false;           // split <think>...</think> into reasoning_content
  std::optional<ToolCallFormat> tool_format;  // nullopt: requests with tools are refused
  size_t max_body_bytes = size_t{8} << 20;    // larger bodies get 413
  int http_threads = 0;                   // 0: enough for max_num_seqs streams plus queued ones
  std::shared_ptr<WeightsIdentity> weights;  // null: /v1/models says nothing of the weights
};

class Server {
 public:
  Server(Engine& engine, const Tokenizer& tok, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket (throws zen::Error naming host:port when it cannot).
  void bind();
  int port() const;
  // Serves until stop() (from any thread).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zen::server
