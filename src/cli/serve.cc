// zen serve: the OpenAI-compatible HTTP server over the serving engine.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include "attest/digest.h"
#include "base/error.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/parallel_flags.h"
#include "cli/speculative_flags.h"
#include "cli/weights_flags.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "model/model.h"
#include "server/http_server.h"
#include "server/tool_parser.h"

namespace zen::cli {
namespace {

// /v1/models reports the weights root; without --verify-weights it is computed after start by
// one low-priority thread (a 0.5 GB model takes about half a second of one core). Cancelled
// and joined when serve returns: left running, it hashed on into libcrypto's clean-up at exit
// and crashed the process (tests/test_server.py saw it about once in ten shutdowns).
class BackgroundWeightsHash {
 public:
  BackgroundWeightsHash(const std::string& path, std::shared_ptr<server::WeightsIdentity> weights)
      : thread_([this, path, weights] {
          setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
          try {
            attest::DigestOptions o;
            o.threads = 1;
            o.weight_files = false;
            o.cancel = &cancel_;
            const std::string root = attest::to_hex(attest::digest_weights(path, o).root);
            std::lock_guard<std::mutex> lock(weights->mu);
            weights->root = root;
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(weights->mu);
            weights->error = e.what();
          }
        }) {}
  ~BackgroundWeightsHash() {
    cancel_ = true;
    thread_.join();
  }
  BackgroundWeightsHash(const BackgroundWeightsHash&) = delete;
  BackgroundWeightsHash& operator=(const BackgroundWeightsHash&) = delete;

 private:
  std::atomic<bool> cancel_{false};
  std::thread thread_;  // declared last: started once cancel_ exists
};

}  // namespace

int serve_command(int argc, char** argv) {
  Flags f("serve", with_parallel_flags(with_weights_flags(with_speculative_flags({{"model", FlagKind::String, "model path: HF folder, .safetensors, or .gguf (default: the installed default model)", {}},
                    {"host", FlagKind::String, "address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)", {}},
                    {"port", FlagKind::Int, "port (default 30000; 0 picks a free one)", {}},
                    {"served-model-name", FlagKind::String, "model name in the API (default: the model file's name)", {}},
                    {"context-window", FlagKind::Int, "tokens per request, prompt + output (default: the model's)", {}},
                    {"max-model-len", FlagKind::Int, "alias of --context-window", {}},
                    {"kv-cache-quant", FlagKind::Choice, "KV cache precision (auto = f32 on the CPU)",
                     {"auto", "f32", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"}},
                    {"kv-memory", FlagKind::String, "KV cache size, e.g. 4G (default: a quarter of the available RAM)", {}},
                    {"nvfp4-exact", FlagKind::Bool, "NVFP4 with f32 activations (exact, slower; default int8 per block of 32)", {}},
                    {"max-num-seqs", FlagKind::Int, "requests decoded together (default 64)", {}},
                    {"max-num-batched-tokens", FlagKind::Int, "tokens per engine step (default 512)", {}},
                    {"long-prefill-token-threshold", FlagKind::Int,
                     "a prompt with more tokens left is long: while others wait or decode it prefills at most this many a step (default: max-num-batched-tokens / 4)", {}},
                    {"max-num-partial-prefills", FlagKind::Int, "prompts prefilled at once (default 4)", {}},
                    {"max-long-partial-prefills", FlagKind::Int, "long prompts prefilled at once; shorter ones pass them (default 1)", {}},
                    {"max-waiting", FlagKind::Int, "queued requests beyond which new ones get 429 (default 1024)", {}},
                    {"no-prefix-cache", FlagKind::Bool, "do not reuse KV blocks of shared prompt prefixes", {}},
                    {"state-snapshot-memory", FlagKind::String,
                     "hybrid models: memory for recurrent-state snapshots of cached prefixes, e.g. 2G (default: an eighth of the available RAM, at most 64 snapshots; 0 keeps none)", {}},
                    {"api-key", FlagKind::String, "require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize and /metrics (default: $ZEN_API_KEY, else none); /health and the chat page stay open", {}},
                    {"open-metrics", FlagKind::Bool, "serve /metrics without the API key", {}},
                    {"reasoning-parser", FlagKind::Choice, "split <think> reasoning into reasoning_content (default: qwen3 when the chat template thinks)",
                     {"qwen3", "none"}},
                    {"tool-call-parser", FlagKind::Choice, "tool-call format (default: detected from the chat template)",
                     {"qwen3_xml", "hermes", "none"}},
                    {"enable-auto-tool-choice", FlagKind::Bool, "accepted for vLLM compatibility: tool_choice auto is on whenever a tool-call parser is", {}},
                    {"threads", FlagKind::Int, "worker threads (default: all cores)", {}},
                    {"help", FlagKind::Bool, "show this help", {}}}))));
  f.parse(argc, argv, 2);
  if (f.flag("help")) {
    std::fputs(f.usage().c_str(), stdout);
    return 0;
  }
  if (!f.positional().empty()) fail("unexpected argument '", f.positional()[0], "' (the model goes in --model)");
  if (f.has("context-window") && f.has("max-model-len")) fail("give --context-window or --max-model-len, not both");

  EngineOptions eo;
  eo.kv_dtype = parse_kv_cache_quant(f.str("kv-cache-quant", "auto"));
  if (f.has("kv-memory")) eo.kv_memory_bytes = parse_byte_size("kv-memory", f.str("kv-memory"));
  eo.context_window = f.integer("context-window", f.integer("max-model-len", 0));
  eo.max_num_seqs = f.integer("max-num-seqs", 64);
  eo.max_num_batched_tokens = f.integer("max-num-batched-tokens", 512);
  eo.long_prefill_token_threshold = f.integer("long-prefill-token-threshold", 0);
  eo.max_num_partial_prefills = f.integer("max-num-partial-prefills", 4);
  eo.max_long_partial_prefills = f.integer("max-long-partial-prefills", 1);
  eo.max_waiting = f.integer("max-waiting", 1024);
  eo.prefix_cache = !f.flag("no-prefix-cache");
  if (f.has("state-snapshot-memory")) {
    const std::string size = f.str("state-snapshot-memory");
    if (size == "0") eo.state_snapshot_slots = 0;
    else eo.state_snapshot_memory_bytes = parse_byte_size("state-snapshot-memory", size);
  }
  if (eo.context_window < 0 || (eo.context_window == 0 && (f.has("context-window") || f.has("max-model-len"))))
    fail("--context-window must be positive (omit it for the model's own), got ", eo.context_window);
  if (f.has("long-prefill-token-threshold") && eo.long_prefill_token_threshold < 1)
    fail("--long-prefill-token-threshold must be at least 1, got ", eo.long_prefill_token_threshold);
  apply_speculative_flags(f, eo);
  eo.validate();

  if (f.has("host") && f.str("host").empty()) fail("--host must name an address (127.0.0.1, ::1, 0.0.0.0, ...), got ''");
  const int64_t port = f.integer("port", 30000);
  if (port < 0 || port > 65535) fail("--port must be in [0, 65535], got ", port);

  // SIGINT / SIGTERM are taken by one thread that stops the server; blocked here, before the
  // model's thread pool starts, so that every thread inherits the mask. A peer that hangs up
  // must not kill the process with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  LoadOptions load;
  load.n_threads = threads_flag(f);
  load.nvfp4_exact_activations = f.flag("nvfp4-exact");
  apply_parallel_flags(f, load);
  const std::string path = resolve_model_path(f.str("model"));
  auto weights = std::make_shared<server::WeightsIdentity>();
  weights->root = verify_weights_flag(f, path, load.n_threads);  // before loading: a mismatch never serves
  weights->verified = !weights->root.empty();
  auto model = Model::load(path, load);
  if (serve_as_worker(*model, load)) return 0;
  const Tokenizer& tok = *model->tokenizer();

  server::ServerOptions so;
  so.host = f.str("host", "127.0.0.1");
  so.port = static_cast<int>(port);
  // Default name: the file's stem, or its folder's name for generic stems (models/default/model.gguf).
  const std::filesystem::path model_path = std::filesystem::weakly_canonical(path);
  std::string default_name = model_path.stem().string();
  if (default_name == "model" || default_name.empty() || std::filesystem::is_directory(model_path))
    default_name = std::filesystem::is_directory(model_path) ? model_path.filename().string() : model_path.parent_path().filename().string();
  so.model_name = f.str("served-model-name", default_name);
  so.api_key = f.str("api-key");
  so.open_metrics = f.flag("open-metrics");
  if (so.api_key.empty())
    if (const char* env = std::getenv("ZEN_API_KEY")) so.api_key = env;
  const std::string reasoning = f.str("reasoning-parser", "");
  so.parse_reasoning = reasoning.empty() ? tok.chat_template().find("<think>") != std::string::npos : reasoning == "qwen3";
  const std::string tools = f.str("tool-call-parser", "");
  so.tool_format = tools.empty() ? server::detect_tool_call_format(tok.chat_template()) : server::parse_tool_call_format(tools);

  so.weights = weights;

  Engine engine(*model, eo);
  server::Server server(engine, tok, so);
  server.bind();
  engine.start();
  std::optional<BackgroundWeightsHash> hashing;
  if (!weights->verified) hashing.emplace(path, weights);
  // Joined before engine and server go out of scope: detached, it could still be inside
  // server.stop() when run() returned and main destroyed the server (a crash at exit).
  std::atomic<bool> run_ended{false};
  std::thread signal_waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (run_ended) return;  // woken by main below: the server stopped on its own
    std::fprintf(stderr, "zen serve: signal %d, shutting down\n", sig);
    engine.stop();  // requests in flight finish with "abort", so their streams end
    server.stop();
  });

  const std::string url = "http://" + (so.host == "0.0.0.0" ? std::string("127.0.0.1") : so.host) + ":" + std::to_string(server.port());
  std::printf("model: %s (served as \"%s\")\n%s\ncontext window: %" PRId64 " tokens; reasoning parser: %s; tool-call parser: %s\n",
              path.c_str(), so.model_name.c_str(), engine.describe().c_str(), engine.context_window(),
              so.parse_reasoning ? "qwen3" : "none",
              !so.tool_format ? "none" : *so.tool_format == server::ToolCallFormat::Hermes ? "hermes" : "qwen3_xml");
  std::printf("\nChat page: %s/\nOpenAI API: %s/v1\n\nTry:\n  curl %s/v1/chat/completions -H 'Content-Type: application/json'%s \\\n"
              "    -d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}]}'\n\n",
              url.c_str(), url.c_str(), url.c_str(), so.api_key.empty() ? "" : " -H \"Authorization: Bearer $ZEN_API_KEY\"",
              so.model_name.c_str());
  std::fflush(stdout);
  server.run();
  run_ended = true;
  pthread_kill(signal_waiter.native_handle(), SIGTERM);  // no effect once it has returned
  signal_waiter.join();
  engine.stop();
  return 0;
}

}  // namespace zen::cli
