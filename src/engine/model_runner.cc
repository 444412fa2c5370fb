#include "engine/model_runner.h"

#include <algorithm>

namespace zen {

float* ModelRunner::run(std::span<const ScheduledSeq> plan, std::span<Sequence* const> running) {
  if (windows_) {  // every running window is pinned before any slice maps a block
    windows_->begin_step();
    for (const Sequence* seq : running) windows_->pin(seq->blocks, seq->computed);
    for (const ScheduledSeq& s : plan) windows_->pin(s.seq->blocks, s.seq->computed);
    window_tables_.resize(plan.size());
  }
  slices_.clear();
  first_row_.clear();
  first_token_.clear();
  int64_t tokens = 0;
  histories_.resize(plan.size());
  int64_t rows = 0;
  for (const ScheduledSeq& s : plan) {
    const Sequence& seq = *s.seq;
    SeqSlice slice;
    slice.tokens = std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(seq.computed),
                                                                 static_cast<size_t>(s.n_tokens));
    slice.pos = seq.computed;
    slice.blocks = seq.blocks;
    slice.state_slot = seq.state_slot;
    slice.all_logits = s.all_logits;
    slice.recurrent_form = states_ != nullptr && seq.computed >= seq.prompt_len;  // recomputing decoded tokens
    if (windows_) {
      std::vector<int32_t>& table = window_tables_[slices_.size()];
      windows_->table(seq.blocks, seq.computed, s.n_tokens, table);
      slice.window_blocks = table;
    }
    if (!seq.draft_states.empty()) {
      const size_t i = slices_.size();
      histories_[i].assign(seq.draft_states.begin(), seq.draft_states.end());
      histories_[i].push_back(seq.state_slot);
      slice.state_history = histories_[i];
    }
    slices_.push_back(slice);
    first_row_.push_back(rows);
    first_token_.push_back(tokens);
    tokens += s.n_tokens;
    rows += s.all_logits ? s.n_tokens : 1;
  }
  const auto vocab = static_cast<size_t>(model_.config().vocab_size);
  if (logits_.size() < static_cast<size_t>(rows) * vocab) logits_.resize(static_cast<size_t>(rows) * vocab);
  ForwardBatch batch;
  batch.kv = &kv_;
  batch.window_kv = windows_ ? window_kv_ : nullptr;
  batch.states = states_;
  batch.seqs = slices_;
  // Greedy rows without logprobs need only their argmax (a vocabulary-split model then
  // exchanges 8 bytes a row instead of the logits).
  batch.argmax_only = std::all_of(plan.begin(), plan.end(), [](const ScheduledSeq& s) {
    return s.seq->sampler && s.seq->sampler->argmax_of_raw_logits() && s.seq->params.top_logprobs < 0;
  });
  if (!tap_layers_.empty()) {
    const auto width = static_cast<size_t>(model_.config().hidden_size) * tap_layers_.size();
    if (taps_.size() < static_cast<size_t>(tokens) * width) taps_.resize(static_cast<size_t>(tokens) * width);
    batch.tap_layers = tap_layers_;
    batch.taps = taps_.data();
  }
  model_.forward(batch, logits_.data());
  return logits_.data();
}

}  // namespace zen
