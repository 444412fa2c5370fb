// Decides each step which sequences run and with how many tokens, within a token budget and
// a sequence limit, fair under mixed load:
//   1. decodes of running sequences (one token each), oldest first;
//   2. running prefills, oldest first; under contention a long one (more than
//      long_prefill_token_threshold tokens left) gets at most that many tokens a step;
//   3. waiting sequences, FCFS, while at most max_num_partial_prefills prefill at once, of which
//      at most max_long_partial_prefills long ones: a short prompt queued behind a long one
//      passes it rather than wait for its whole prefill. A prompt whose leading full blocks a
//      running prefill is computing right now waits for them and takes them from the prefix
//      cache instead of computing the same KV twice (the choices of an n > 1 request, clients
//      sending one system prompt at once).
// A prefill chunk also shrinks as its context grows (attention_span), so a step's work, and
// with it the delay before an abort or a new request takes effect, stays bounded.
// When KV blocks run out, the newest running sequence is preempted (its blocks freed; it is
// recomputed later, mostly from the prefix cache).
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"
#include "engine/state_cache.h"
#include "engine/window_blocks.h"

namespace zen {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 512;
  // vLLM's names. Threshold 0: max_num_batched_tokens / 4 (rounded up to state_align).
  int64_t long_prefill_token_threshold = 0;
  int64_t max_num_partial_prefills = 4;
  int64_t max_long_partial_prefills = 1;
  // Tokens of context whose attention costs as much as one token's weights (0: attention
  // ignored): a prefill chunk at context c costs n * (1 + (c + n) / span) tokens of budget.
  int64_t attention_span = 0;
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
  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  // Where this sequence's next step must end, given `budget` tokens (0: cannot run now).
  int64_t chunk_for(const Sequence& seq, int64_t budget) const;
  int64_t long_prefill_threshold() const { return long_threshold_; }
  void set_states(StateCache* states) { states_ = states; }  // before the first schedule()
  // Sliding-window layers kept apart: a cached prefix counts only where its window is held.
  void set_windows(const WindowBlocks* windows) { windows_ = windows; }

 private:
  bool is_long(const Sequence& seq) const { return seq.uncomputed() > long_threshold_; }
  // The tokens a prefill from `computed` may take of `budget`: under contention a long one's
  // share is capped, and the chunk shrinks as its context (attention) grows.
  int64_t prefill_budget(const Sequence& seq, int64_t computed, int64_t budget, bool contended) const;
  // Schedules a running sequence (growing its blocks, preempting the newest if short); false
  // when it was itself the one preempted.
  bool run(Sequence* seq, int64_t n, int64_t& budget, std::vector<ScheduledSeq>& out, bool& preempted);
  bool admit(Sequence* seq, int64_t budget, bool contended, std::vector<ScheduledSeq>& out);
  bool waits_for_shared_prefill(const Sequence& seq) const;
  void preempt(Sequence* seq, int64_t& budget, std::vector<ScheduledSeq>& out);
  void free_resources(Sequence* seq);
  SchedulerConfig config_;
  BlockManager& blocks_;
  StateCache* states_;
  const WindowBlocks* windows_ = nullptr;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order: back is the newest
  int64_t long_threshold_ = 0;
  int64_t preemptions_ = 0;
};

}  // namespace zen
