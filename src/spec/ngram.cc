#include "spec/ngram.h"

#include <algorithm>

#include "base/error.h"

namespace zen::spec {

NgramProposer::NgramProposer(const NgramOptions& options) : o_(options) {
  if (o_.prompt_lookup_min < 1) fail("prompt_lookup_min must be at least 1, got ", o_.prompt_lookup_min);
  if (o_.prompt_lookup_max < o_.prompt_lookup_min)
    fail("prompt_lookup_max (", o_.prompt_lookup_max, ") must be at least prompt_lookup_min (", o_.prompt_lookup_min, ")");
}

std::vector<int32_t> NgramProposer::lookup(std::span<const int32_t> tokens, int32_t k) const {
  const auto len = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(o_.prompt_lookup_max, len - 1); n >= o_.prompt_lookup_min; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(static_cast<size_t>(len - n));
    // Latest start i < len - n with tokens[i, i + n) == suffix; what follows it is the draft.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(len, from + k);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

void NgramProposer::propose(std::span<DraftSlot> slots) {
  for (DraftSlot& s : slots) s.draft = lookup(s.tokens, s.max_tokens);
}

}  // namespace zen::spec
