// One request as the engine tracks it: its tokens (prompt, then generated), how many of them
// are already in the cache, where their KV blocks and recurrent state live.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "sampling/sampler.h"

namespace zen {

enum class SeqStatus { Waiting, Running, Finished };

struct Sequence {
  using Clock = std::chrono::steady_clock;

  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int64_t prompt_len = 0;
  int64_t computed = 0;         // leading tokens whose KV (and state) are in the cache
  int64_t cached_prompt = 0;    // prompt tokens served by the prefix cache (first admission)
  bool admitted_once = false;
  std::vector<int32_t> blocks;        // KV block table
  std::vector<uint64_t> block_hashes; // chain hash of each full block, in order
  int32_t state_slot = -1;            // live recurrent-state slot (hybrid models)
  SeqStatus status = SeqStatus::Waiting;
  bool abort_requested = false;
  // Speculative decoding: the last num_draft tokens are drafts under verification this step
  // (never part of the sequence's text until accepted), with the draft's probabilities
  // ([num_draft, vocab], empty for point masses).
  int32_t num_draft = 0;
  std::vector<float> draft_q;
  // Hybrid models: scratch state slots receiving the state after the last token and each
  // draft but the final one (which lands in state_slot); [num_draft] while drafts are held.
  std::vector<int32_t> draft_states;
  int64_t drafted_total = 0, accepted_total = 0;  // this request's drafted / accepted tokens

  RequestParams params;
  std::unique_ptr<Sampler> sampler;
  Engine::Callback on_update;
  Clock::time_point arrival;
  double first_token_seconds = -1;

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  int64_t uncomputed() const { return static_cast<int64_t>(tokens.size()) - computed; }
  // Decoding (one token to run, plus any drafts), as opposed to prefilling.
  bool decoding() const { return uncomputed() - num_draft == 1; }
  // Forgets drafts that will not be verified.
  void drop_drafts(int32_t keep = 0) {
    if (keep >= num_draft) return;
    tokens.resize(tokens.size() - static_cast<size_t>(num_draft - keep));
    draft_q.resize(draft_q.size() / static_cast<size_t>(num_draft) * static_cast<size_t>(keep));
    num_draft = keep;
  }
};

}  // namespace zen
