// Decides each step which sequences run and with how many tokens: running sequences first
// (decodes and unfinished prefill chunks, oldest first), then waiting ones FCFS, within a
// token budget and a sequence limit. When KV blocks run out, the newest running sequence is
// preempted (its blocks freed; it is recomputed later, mostly from the prefix cache).
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"
#include "engine/state_cache.h"

namespace zen {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 512;
  // Hybrid models: prefill steps end at multiples of this many tokens (the Gated DeltaNet
  // chunk), so any split gives the same state and a snapshot exists there; 0 for dense.
  int64_t state_align = 0;
};

struct ScheduledSeq {
  Sequence* seq;
  int64_t n_tokens;          // tokens[seq->computed, seq->computed + n_tokens) run this step
  bool all_logits = false;   // a logits row per new token (speculative verification)
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockManager& blocks, StateCache* states);

  void add(Sequence* seq) { waiting_.push_back(seq); }
  // Plans one step. Sequences preempted while planning are back at the front of waiting.
  std::vector<ScheduledSeq> schedule();
  // Frees a finished or aborted sequence's blocks and state, wherever it is queued.
  void remove(Sequence* seq);
  // Speculative decoding: forgets tokens from position keep_tokens on (rejected drafts). Their
  // KV slots are simply overwritten later; blocks past the end go back to the pool. The
  // caller restores a hybrid model's recurrent state (SeqSlice::state_history).
  void rollback(Sequence* seq, int64_t keep_tokens);

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t preemptions() const { return preemptions_; }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  // Where this sequence's next step must end, given `budget` tokens (0: cannot run now).
  int64_t chunk_for(const Sequence& seq, int64_t budget) const;

 private:
  bool admit(Sequence* seq, int64_t budget, std::vector<ScheduledSeq>& out);
  void preempt(Sequence* seq);
  void free_resources(Sequence* seq);
  SchedulerConfig config_;
  BlockManager& blocks_;
  StateCache* states_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order: back is the newest
  int64_t preemptions_ = 0;
};

}  // namespace zen
