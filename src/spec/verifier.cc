#include "spec/verifier.h"

#include <algorithm>

#include "base/error.h"

namespace zen::spec {

Verdict Verifier::verify(Sampler& sampler, const float* rows, int64_t vocab, std::span<const int32_t> draft,
                         std::span<const float> q, const EmitFn& emit) {
  ZEN_CHECK(q.empty() || static_cast<int64_t>(q.size()) == static_cast<int64_t>(draft.size()) * vocab,
            "draft probabilities: ", q.size(), " floats for ", draft.size(), " drafts of vocabulary ", vocab);
  Verdict v;
  scratch_.resize(static_cast<size_t>(vocab));
  auto emit_token = [&](int32_t token, int64_t row) {
    sampler.accept(token);
    ++v.emitted;
    return emit(token, row);
  };
  for (size_t j = 0; j <= draft.size(); ++j) {
    const float* row = rows + static_cast<int64_t>(j) * vocab;
    std::copy(row, row + vocab, scratch_.begin());
    const auto r = static_cast<int64_t>(j);
    if (j == draft.size()) {  // every draft survived: the bonus token, drawn as plain decoding would
      emit_token(sampler.sample(scratch_.data(), vocab), r);
      return v;
    }
    const int32_t d = draft[j];
    const std::span<const TokenProb> p = sampler.distribution(scratch_.data(), vocab);
    if (sampler.greedy()) {
      if (p[0].token != d) {
        emit_token(p[0].token, r);
        return v;
      }
    } else if (q.empty()) {
      // A point mass on d: draw t from p as plain decoding would, accept when t == d. That is
      // rejection sampling with q = 1 at d (accepted with probability p(d); otherwise t is a
      // draw from p without d, i.e. from norm(max(p - q, 0))), and it takes exactly one draw
      // per emitted token, so a seeded request gives the same output as without speculation.
      const int32_t t = sampler.draw(p);
      if (t != d) {
        emit_token(t, r);
        return v;
      }
    } else {
      const float* qj = q.data() + r * vocab;
      auto q_of = [&](int32_t t) { return static_cast<double>(qj[t]); };
      double p_d = 0;
      for (const TokenProb& t : p)
        if (t.token == d) p_d = t.p;
      const double q_d = q_of(d);
      // Accept with probability min(1, p/q); a draft q says it could not have drawn is rejected.
      if (!(q_d > 0 && sampler.uniform() * q_d < p_d)) {
        residual_.clear();
        double total = 0;
        for (const TokenProb& t : p)
          if (const double m = t.p - q_of(t.token); m > 0) {
            residual_.push_back({t.token, m});
            total += m;
          }
        // p <= q everywhere only through rounding (then p == q): draw from p itself.
        emit_token(total > 0 ? sampler.draw(residual_, total) : sampler.draw(p), r);
        return v;
      }
    }
    ++v.accepted;
    if (!emit_token(d, r)) return v;
  }
  return v;
}

}  // namespace zen::spec
