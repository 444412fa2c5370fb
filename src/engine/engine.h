// The serving engine: requests in, streams of tokens out. One engine thread runs
//   step() = schedule -> run (one batched forward) -> postprocess (sample, stream, finish)
// over a paged KV cache with prefix caching, continuous batching, chunked prefill and
// preemption by recompute. Callbacks run on the engine thread: keep them short (push into a
// queue) and never call back into the engine from them except abort().
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sampling/sampler.h"
#include "spec/config.h"
#include "spec/controller.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace zen {

namespace grammar {
class CompiledGrammar;
}

struct EngineOptions {
  KvDType kv_dtype = KvDType::F32;
  int64_t kv_memory_bytes = 0;         // 0: kv_memory_fraction of the available RAM
  double kv_memory_fraction = 0.25;    // (pages are committed only as the cache fills)
  int64_t block_size = KvPool::kDefaultBlockSize;
  int64_t context_window = 0;          // 0: the model's max_position_embeddings
  int64_t max_num_seqs = 64;           // running sequences per step
  int64_t max_num_batched_tokens = 512;  // tokens per forward (prefill chunks + decodes)
  // Fairness under mixed load (vLLM's names; scheduler.h): a long prefill's share of a step
  // while others wait or decode (0: max_num_batched_tokens / 4), and how many prompts (long
  // ones) may prefill at once.
  int64_t long_prefill_token_threshold = 0;
  int64_t max_num_partial_prefills = 4;
  int64_t max_long_partial_prefills = 1;
  int64_t max_waiting = 1024;          // queued requests beyond which add() reports QueueFull
  bool prefix_cache = true;
  // Hybrid models: recurrent-state snapshots kept for prefix reuse, at most
  // state_snapshot_slots of them and at most state_snapshot_memory_bytes (0:
  // state_snapshot_memory_fraction of the available RAM); a Zen6 state is 150 MB, so the memory
  // bound is the one that usually decides. No snapshots without the prefix cache.
  int64_t state_snapshot_slots = 64;
  int64_t state_snapshot_memory_bytes = 0;
  double state_snapshot_memory_fraction = 0.125;
  // Speculative decoding (off unless a method is set), and where to write one JSON line per
  // verification (empty: nowhere).
  spec::SpeculativeConfig speculative;
  std::string spec_trace_path;

  // Sane maxima: a flag that sizes threads or memory is refused past them, naming the flag.
  static constexpr int64_t kMaxNumSeqs = 1024;
  static constexpr int64_t kMaxBatchedTokens = int64_t{1} << 18;
  static constexpr int64_t kMaxWaiting = int64_t{1} << 20;
  static constexpr int64_t kMaxContextWindow = int64_t{1} << 24;
  // Throws zen::Error naming the flag (serve checks before loading a model; Engine again).
  void validate() const;
};

struct RequestParams {
  SamplingParams sampling;
  // Constrained decoding: every sampled token is one the grammar allows (null: free text).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  int64_t max_tokens = 256;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // finish with "stop" on these (besides the model's EOS)
  int32_t top_logprobs = -1;           // -1: no logprobs; 0: the chosen token's; k: plus top k
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct GeneratedToken {
  int32_t token = 0;
  float logprob = 0.0f;             // set when RequestParams::top_logprobs >= 0
  std::vector<TokenLogprob> top;    // top_logprobs entries, most likely first
};

// What a request's callback receives: the tokens produced since the last update, and, once,
// finished = true with the reason.
struct RequestUpdate {
  uint64_t id = 0;
  std::vector<GeneratedToken> tokens;
  bool finished = false;
  std::string finish_reason;  // "stop" (EOS / stop token), "length", "abort", "error"
  std::string error;          // for "error"
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
  int64_t completion_tokens = 0;
  double first_token_seconds = 0;    // time from add() to the first token (TTFT)
  int64_t spec_draft_tokens = 0;     // speculative tokens drafted / accepted for this request
  int64_t spec_accepted_tokens = 0;
};

enum class AddStatus { Ok, Invalid, TooLong, QueueFull, Stopped };

struct AddResult {
  AddStatus status = AddStatus::Ok;
  uint64_t id = 0;
  std::string message;  // why, with the numbers (e.g. "prompt 900 + max_tokens 200 > context 1024")
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0;
  int64_t kv_block_size = 0;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0;  // totals since start
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t finished_stop = 0, finished_length = 0, finished_abort = 0, finished_error = 0;
  // Speculative decoding, with vLLM's meanings: verifications that carried drafts, drafted
  // tokens, accepted tokens, accepted tokens by draft position; the controller's mean k.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::array<int64_t, spec::kMaxDraftTokens> spec_accepted_per_pos{};
  double spec_mean_k = 0;
  std::vector<std::pair<std::string, double>> spec_time_by_part;  // Proposer::time_by_part()
};

class Scheduler;
class ModelRunner;
namespace spec {
class Proposer;
}

class Engine {
 public:
  using Callback = std::function<void(const RequestUpdate&)>;
  Engine(Model& model, const EngineOptions& options);
  ~Engine();  // stops the engine thread; pending requests finish with "abort"
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Validates (token ids, sampling params, length against the context window)
  // and queues the request; on_update is called from the engine thread.
  AddResult add(std::vector<int32_t> prompt, const RequestParams& params, Callback on_update);
  // Thread-safe. The request finishes with "abort" and frees its blocks at the next step.
  void abort(uint64_t id);

  // Runs steps on a background thread until stop(). Without start(), drive with step().
  void start();
  void stop();
  // One scheduling step; returns false when there was nothing to do.
  bool step();
  // Runs steps until no request is waiting or running (offline use, tests).
  void run_until_idle();

  // Speculative decoding with this proposer (tests; proposers built around the target model),
  // in place of the one options().speculative names. Call before the first step.
  void use_proposer(std::unique_ptr<spec::Proposer> proposer, const spec::ControllerOptions& control);
  // The controller's view (tests, the start-up log); null without speculation.
  const spec::Controller* controller() const;

  EngineStats stats() const;  // thread-safe snapshot
  const EngineOptions& options() const { return options_; }
  int64_t context_window() const;
  int64_t kv_capacity_tokens() const;  // blocks x block size
  // A main pool that keeps no K/V (every layer slides, or none keeps K/V) holds block ids
  // only, at most as many as the KV budget holds at this many bytes of bookkeeping each.
  static constexpr int64_t kBlockIdBytes = 256;
  // The start-up summary vLLM users expect: KV cache size in tokens and bytes, and the
  // maximum concurrency at the full context window (plus recurrent-state memory for hybrids).
  std::string describe() const;
  Model& model() { return model_; }

 private:
  struct Impl;
  Model& model_;
  EngineOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zen
