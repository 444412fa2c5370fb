// Lossless verification of a draft against the target model's logits.
//   Greedy: accept the longest prefix equal to the target's choice, then the target's token.
//   Sampling: standard rejection sampling (Leviathan et al. 2023; vLLM's rejection_sampler):
//   accept draft token d with probability min(1, p(d) / q(d)); on rejection draw from
//   norm(max(p - q, 0)); when every draft survives, draw a bonus token from p. q is the
//   draft's distribution, or a point mass on d for proposers that give none (n-gram, suffix).
// With a point mass the test is done by drawing t from p and accepting when t == d: the same
// law, one random draw per emitted token, so seeded output equals plain decoding's exactly.
// p is exactly the distribution plain decoding samples from (logit bias, penalties as of the
// tokens accepted so far, temperature, top-k / top-p / min-p), so the output distribution,
// and with greedy decoding the output itself, equals decoding without speculation.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace zen::spec {

// Called for each emitted token in order, with the index of the logits row it came from
// (row j follows the last token and draft[0, j)). Returning false stops verification there
// (a stop token, max_tokens): later drafts are neither accepted nor emitted.
using EmitFn = std::function<bool(int32_t token, int64_t row)>;

struct Verdict {
  int32_t accepted = 0;  // drafts accepted (emitted as themselves)
  int32_t emitted = 0;   // tokens emitted: accepted + 1 unless emit() stopped early
};

class Verifier {
 public:
  // Benchmarking only (vLLM's rejection_sample_method "synthetic"): drafts are accepted by
  // chance, not by the target, so the cost of speculation can be measured at a chosen
  // acceptance with a drafter that is never right. rates[i]: the probability that drafts
  // 0..i are all accepted (non-increasing; the last applies further on); a rejected or final
  // position emits the target's own token. Output is NOT the model's: never serve with it.
  void set_synthetic(std::vector<double> rates, uint64_t seed);
  bool synthetic() const { return !synthetic_.empty(); }
  // rows: [draft.size() + 1, vocab] target logits, left untouched; q: empty (point masses) or
  // [draft.size(), vocab]. The sampler sees every emitted token (accept()) before the next row.
  Verdict verify(Sampler& sampler, const float* rows, int64_t vocab, std::span<const int32_t> draft,
                 std::span<const float> q, const EmitFn& emit);

 private:
  Verdict verify_synthetic(Sampler& sampler, const float* rows, int64_t vocab, std::span<const int32_t> draft,
                           const EmitFn& emit);

  std::vector<double> synthetic_;       // conditional acceptance per position (empty: off)
  uint64_t synthetic_state_ = 0;        // splitmix64
  std::vector<float> scratch_;          // [vocab] a row the sampler may edit
  std::vector<TokenProb> residual_;     // norm(max(p - q, 0)) before normalising
};

}  // namespace zen::spec
