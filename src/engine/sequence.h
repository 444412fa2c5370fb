// One request as the engine tracks it: its tokens (prompt, then generated), how many of them
// are already in the cache, where their KV blocks and recurrent state live.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"

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

  RequestParams params;
  std::unique_ptr<Sampler> sampler;
  Engine::Callback on_update;
  Clock::time_point arrival;
  double first_token_seconds = -1;

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  int64_t uncomputed() const { return static_cast<int64_t>(tokens.size()) - computed; }
};

}  // namespace zen
