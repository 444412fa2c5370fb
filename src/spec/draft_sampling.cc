#include "spec/draft_sampling.h"

namespace zen::spec {
namespace {

// The draft's sampling: the request's temperature / top-k / top-p / min-p and seed, nothing else.
SamplingParams drafting_params(const SamplingParams& r) {
  SamplingParams p;
  p.temperature = r.temperature;
  p.top_k = r.top_k;
  p.top_p = r.top_p;
  p.min_p = r.min_p;
  p.has_seed = r.has_seed;
  p.seed = r.has_seed ? r.seed ^ 0x5DEECE66Dd1f0a3bULL : 0;  // not the verifier's own stream
  return p;
}

bool same_drafting(const SamplingParams& a, const SamplingParams& b) {
  return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p && a.min_p == b.min_p &&
         a.has_seed == b.has_seed && a.seed == b.seed;
}

}  // namespace

bool is_greedy_request(const SamplingParams* p) { return p == nullptr || p->temperature == 0.0f || p->top_k == 1; }

void DraftSampler::draw(const SamplingParams* request, const float* row, int64_t use_vocab, int64_t target_vocab,
                        DraftSlot& slot) {
  if (is_greedy_request(request)) {
    slot.draft.push_back(argmax(row, use_vocab));
    return;
  }
  Sampler& sampler = stream(*request);
  scratch_.assign(row, row + use_vocab);
  const std::span<const TokenProb> dist = sampler.distribution(scratch_.data(), use_vocab);
  const int32_t t = sampler.draw(dist);
  float* q = slot.q.data() + slot.draft.size() * static_cast<size_t>(target_vocab);
  for (const TokenProb& e : dist) q[e.token] = static_cast<float>(e.p);
  slot.draft.push_back(t);
}

Sampler& DraftSampler::stream(const SamplingParams& request) {
  const SamplingParams p = drafting_params(request);
  if (!sampler_ || !same_drafting(params_, p)) {
    sampler_ = std::make_unique<Sampler>(p, std::span<const int32_t>());
    params_ = p;
  }
  return *sampler_;
}

}  // namespace zen::spec
