// How a proposer with logits of its own (a draft model, a DFlash drafter) turns a row into a
// drafted token, so that rejection sampling stays exact: greedy requests (temperature 0 or
// top_k 1) draft the argmax (first maximum wins) and leave q empty, a point mass; sampled
// requests draw from q = the request's temperature / top-k / top-p / min-p over the row, with
// no penalties or logit bias (the verifier's p applies those; any q the draft truly drew from
// is exact), from a per-sequence stream seeded from the request's seed (reproducible runs).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "sampling/sampler.h"
#include "spec/proposer.h"

namespace zen::spec {

bool is_greedy_request(const SamplingParams* p);

// One sequence's draft sampler, rebuilt when the request's sampling changes.
class DraftSampler {
 public:
  // Appends one drafted token to slot.draft from row [use_vocab] (the ids the drafter may
  // draft); sampled requests also fill q row slot.draft.size() - 1 of slot.q, which the caller
  // sized to [max drafts, target_vocab] zeros.
  void draw(const SamplingParams* request, const float* row, int64_t use_vocab, int64_t target_vocab, DraftSlot& slot);
  // The sequence's random stream for a sampled request (for drafters with a distribution of
  // their own, e.g. DFlash 2's selector).
  Sampler& stream(const SamplingParams& request);

 private:
  std::unique_ptr<Sampler> sampler_;
  SamplingParams params_;
  std::vector<float> scratch_;  // [use_vocab] the row, which the sampler edits
};

}  // namespace zen::spec
