// Prompt lookup (n-gram) drafting, as vLLM's `ngram` method: find an earlier occurrence of the
// sequence's last n tokens (n from prompt_lookup_max down to prompt_lookup_min) in its prompt
// and output, and propose the tokens that followed it. Of the occurrences of the longest
// matching n-gram the most recent wins (code edits repeat what was just written). No state,
// no distribution (q is a point mass); a lookup scans the context once per n: O(context x n).
#pragma once
#include "spec/proposer.h"

namespace zen::spec {

struct NgramOptions {
  int32_t prompt_lookup_min = 2;  // shortest suffix worth matching
  int32_t prompt_lookup_max = 5;  // longest suffix tried first
};

class NgramProposer : public Proposer {
 public:
  explicit NgramProposer(const NgramOptions& options);
  std::string_view name() const override { return "ngram"; }
  void propose(std::span<DraftSlot> slots) override;

  // The draft for one context (also used by tests): at most k tokens.
  std::vector<int32_t> lookup(std::span<const int32_t> tokens, int32_t k) const;

 private:
  NgramOptions o_;
};

}  // namespace zen::spec
