#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace zen {

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks, StateCache* states)
    : config_(config), blocks_(blocks), states_(states) {
  if (config.max_num_seqs <= 0) fail("--max-num-seqs must be positive, got ", config.max_num_seqs);
  if (config.max_num_batched_tokens <= 0)
    fail("--max-num-batched-tokens must be positive, got ", config.max_num_batched_tokens);
  if (config.state_align > 0 && config.max_num_batched_tokens < config.state_align)
    fail("--max-num-batched-tokens must be at least ", config.state_align, " for hybrid models, got ",
         config.max_num_batched_tokens);
  if (config.long_prefill_token_threshold < 0)
    fail("--long-prefill-token-threshold must be >= 0, got ", config.long_prefill_token_threshold);
  if (config.max_num_partial_prefills < 1)
    fail("--max-num-partial-prefills must be at least 1, got ", config.max_num_partial_prefills);
  if (config.max_long_partial_prefills < 1 || config.max_long_partial_prefills > config.max_num_partial_prefills)
    fail("--max-long-partial-prefills must be in [1, --max-num-partial-prefills = ", config.max_num_partial_prefills,
         "], got ", config.max_long_partial_prefills);
  if (config.attention_span < 0) fail("attention span must be >= 0, got ", config.attention_span);
  long_threshold_ = config.long_prefill_token_threshold > 0 ? config.long_prefill_token_threshold
                                                            : std::max<int64_t>(config.max_num_batched_tokens / 4, 1);
  if (const int64_t align = config.state_align; align > 0) long_threshold_ = (long_threshold_ + align - 1) / align * align;
}

int64_t Scheduler::prefill_budget(const Sequence& seq, int64_t computed, int64_t budget, bool contended) const {
  int64_t cap = budget;
  if (contended && static_cast<int64_t>(seq.tokens.size()) - computed > long_threshold_)
    cap = std::min(cap, long_threshold_);
  if (config_.attention_span > 0) {
    // The largest n with n * (1 + (c + n) / span) <= cap; never below one hybrid chunk (or 16
    // tokens), so a prefill deep into a long context still moves.
    const double span = static_cast<double>(config_.attention_span);
    const double b = 1.0 + static_cast<double>(computed) / span;
    const auto n = static_cast<int64_t>((std::sqrt(b * b + 4.0 * static_cast<double>(cap) / span) - b) * span / 2.0);
    cap = std::min(cap, std::max({n, config_.state_align, int64_t{16}}));
  }
  return cap;
}

int64_t Scheduler::chunk_for(const Sequence& seq, int64_t budget) const {
  int64_t n = std::min(seq.uncomputed(), budget);
  const int64_t align = config_.state_align;
  if (align == 0 || seq.uncomputed() <= 1 || n <= 0) return std::max<int64_t>(n, 0);
  // Tokens that were decoded (recomputed after preemption) run in decoding's recurrent form,
  // where any split gives the same state; the prompt runs in the chunked one.
  if (seq.computed >= seq.prompt_len) return n;
  const auto total = static_cast<int64_t>(seq.tokens.size());
  int64_t end = seq.computed + n;
  const int64_t last_boundary = ((total - 1) / align) * align;  // a snapshot is taken here
  if (seq.computed < last_boundary) end = std::min(end, last_boundary);
  if (end < total) end = (end / align) * align;
  if (end > seq.prompt_len) end = seq.prompt_len;  // a chunk never mixes the two forms
  return std::max<int64_t>(end - seq.computed, 0);
}

bool Scheduler::admit(Sequence* seq, int64_t budget, bool contended, std::vector<ScheduledSeq>& out) {
  if (num_running() >= config_.max_num_seqs) return false;
  const int64_t bs = blocks_.block_size();
  const auto total = static_cast<int64_t>(seq->tokens.size());
  const BlockManager::PrefixMatch match = blocks_.match_prefix(seq->tokens);
  // At least one token must run to produce logits.
  int64_t cached = std::min(static_cast<int64_t>(match.blocks.size()) * bs, ((total - 1) / bs) * bs);
  if (states_ != nullptr) {  // hybrid: only where a state snapshot exists
    const int64_t align = std::max(config_.state_align, bs);
    cached = (cached / align) * align;
    while (cached > 0 && !states_->has_snapshot(match.hashes[static_cast<size_t>(cached / bs - 1)])) cached -= align;
  }
  if (windows_ != nullptr)  // sliding layers kept apart: only where the window's rows are still held
    while (cached > 0 && !windows_->holds_window(match.blocks, cached)) cached -= bs;
  const auto n_cached_blocks = static_cast<size_t>(cached / bs);

  // Plan the first chunk from the cached position.
  const int64_t saved_computed = seq->computed;
  seq->computed = cached;
  const int64_t n = chunk_for(*seq, prefill_budget(*seq, cached, budget, contended));
  seq->computed = saved_computed;
  if (n == 0) return false;
  int64_t reclaimed = 0;  // matched blocks sitting in the free list stop being free
  for (size_t i = 0; i < n_cached_blocks; ++i) reclaimed += blocks_.ref_count(match.blocks[i]) == 0 ? 1 : 0;
  const int64_t new_blocks = blocks_.blocks_for(cached + n) - static_cast<int64_t>(n_cached_blocks);
  if (new_blocks > blocks_.num_free() - reclaimed) return false;
  int32_t slot = -1;
  if (states_ != nullptr && (slot = states_->allocate()) < 0) return false;

  seq->blocks.assign(match.blocks.begin(), match.blocks.begin() + static_cast<std::ptrdiff_t>(n_cached_blocks));
  blocks_.acquire(seq->blocks);
  seq->block_hashes.assign(match.hashes.begin(), match.hashes.begin() + static_cast<std::ptrdiff_t>(n_cached_blocks));
  seq->computed = cached;
  ZEN_CHECK(blocks_.grow(seq->blocks, cached + n), "planned blocks vanished");
  seq->state_slot = slot;
  if (slot >= 0 && cached > 0)
    ZEN_CHECK(states_->restore_snapshot(seq->block_hashes.back(), slot), "planned snapshot vanished");
  if (!seq->admitted_once) {
    seq->cached_prompt = std::min(cached, seq->prompt_len);
    seq->admitted_once = true;
  }
  seq->status = SeqStatus::Running;
  running_.push_back(seq);
  out.push_back({seq, n});
  return true;
}

bool Scheduler::run(Sequence* seq, int64_t n, int64_t& budget, std::vector<ScheduledSeq>& out, bool& preempted) {
  while (!blocks_.grow(seq->blocks, seq->computed + n)) {
    if (seq->num_draft > 0) {  // drafts are the first thing to go, never a reason to preempt
      n -= seq->num_draft;
      seq->drop_drafts();
      continue;
    }
    Sequence* victim = running_.back();  // newest first
    preempt(victim, budget, out);
    preempted = true;
    if (victim == seq) return false;
  }
  out.push_back({seq, n});
  budget -= n;
  return true;
}

std::vector<ScheduledSeq> Scheduler::schedule() {
  std::vector<ScheduledSeq> out;
  int64_t budget = config_.max_num_batched_tokens;
  const bool contended = running_.size() + waiting_.size() > 1;
  bool preempted = false;
  // Decodes, then prefill chunks, each in admission order. A copy: preemption edits running_.
  const std::vector<Sequence*> order = running_;
  for (const bool prefills : {false, true})
    for (Sequence* seq : order) {
      if (budget <= 0) break;
      if (seq->status != SeqStatus::Running || seq->decoding() == prefills) continue;
      // A decode runs its token and as many of its drafts as the budget allows.
      const int64_t n = prefills ? chunk_for(*seq, prefill_budget(*seq, seq->computed, budget, contended))
                                 : std::min(seq->uncomputed(), budget);
      if (n > 0) run(seq, n, budget, out, preempted);
    }
  if (preempted) return out;  // no admissions while the pool is short

  int64_t partial = 0, long_partial = 0;  // prefills running now
  for (const Sequence* seq : running_)
    if (!seq->decoding()) {
      ++partial;
      long_partial += is_long(*seq) ? 1 : 0;
    }
  for (auto it = waiting_.begin(); it != waiting_.end() && budget > 0;) {
    Sequence* seq = *it;
    if (partial >= config_.max_num_partial_prefills) break;
    const bool long_prompt = is_long(*seq);
    if ((long_prompt && long_partial >= config_.max_long_partial_prefills) || waits_for_shared_prefill(*seq)) {
      ++it;  // prompts behind it may start
      continue;
    }
    if (!admit(seq, budget, contended, out)) break;
    budget -= out.back().n_tokens;
    ++partial;
    long_partial += long_prompt ? 1 : 0;
    it = waiting_.erase(it);
  }
  return out;
}

bool Scheduler::waits_for_shared_prefill(const Sequence& seq) const {
  if (!blocks_.prefix_cache()) return false;
  const int64_t bs = blocks_.block_size();
  const int64_t reusable = ((static_cast<int64_t>(seq.tokens.size()) - 1) / bs) * bs;  // the last token always runs
  if (reusable == 0) return false;
  for (const Sequence* other : running_) {
    if (other->decoding() || other->computed >= reusable) continue;
    const auto n = static_cast<size_t>(std::min<int64_t>(reusable, static_cast<int64_t>(other->tokens.size())));
    const auto common = static_cast<int64_t>(
        std::mismatch(seq.tokens.begin(), seq.tokens.begin() + static_cast<std::ptrdiff_t>(n), other->tokens.begin()).first -
        seq.tokens.begin());
    if ((common / bs) * bs > other->computed) return true;
  }
  return false;
}

void Scheduler::free_resources(Sequence* seq) {
  seq->drop_drafts();
  if (states_ != nullptr) states_->return_scratch(seq->draft_states);
  seq->draft_states.clear();
  blocks_.release(seq->blocks);
  seq->block_hashes.clear();
  if (states_ != nullptr) states_->release(seq->state_slot);
  seq->state_slot = -1;
  seq->computed = 0;
}

void Scheduler::preempt(Sequence* seq, int64_t& budget, std::vector<ScheduledSeq>& out) {
  // Already planned for this step (a decode, planned before the prefills): unplan it.
  if (auto it = std::find_if(out.begin(), out.end(), [seq](const ScheduledSeq& s) { return s.seq == seq; });
      it != out.end()) {
    budget += it->n_tokens;
    out.erase(it);
  }
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  free_resources(seq);
  seq->status = SeqStatus::Waiting;
  waiting_.push_front(seq);
  ++preemptions_;
}

void Scheduler::rollback(Sequence* seq, int64_t keep_tokens) {
  ZEN_CHECK(keep_tokens >= seq->prompt_len && keep_tokens <= static_cast<int64_t>(seq->tokens.size()),
            "rollback to ", keep_tokens, " tokens of ", seq->tokens.size(), " (prompt ", seq->prompt_len, ")");
  seq->tokens.resize(static_cast<size_t>(keep_tokens));
  seq->computed = std::min(seq->computed, keep_tokens);
  blocks_.shrink(seq->blocks, std::max<int64_t>(keep_tokens, 1));
  const auto full = static_cast<size_t>(seq->computed / blocks_.block_size());
  if (seq->block_hashes.size() > full) seq->block_hashes.resize(full);
}

void Scheduler::remove(Sequence* seq) {
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
  free_resources(seq);
  seq->status = SeqStatus::Finished;
}

}  // namespace zen
