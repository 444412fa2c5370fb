#include "engine/model_runner.h"

namespace zen {

float* ModelRunner::run(std::span<const ScheduledSeq> plan) {
  slices_.clear();
  for (const ScheduledSeq& s : plan) {
    const Sequence& seq = *s.seq;
    SeqSlice slice;
    slice.tokens = std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(seq.computed),
                                                                 static_cast<size_t>(s.n_tokens));
    slice.pos = seq.computed;
    slice.blocks = seq.blocks;
    slice.state_slot = seq.state_slot;
    slices_.push_back(slice);
  }
  const auto vocab = static_cast<size_t>(model_.config().vocab_size);
  if (logits_.size() < plan.size() * vocab) logits_.resize(plan.size() * vocab);
  ForwardBatch batch;
  batch.kv = &kv_;
  batch.states = states_;
  batch.seqs = slices_;
  model_.forward(batch, logits_.data());
  return logits_.data();
}

}  // namespace zen
