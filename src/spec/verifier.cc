#include "spec/verifier.h"

#include <algorithm>

#include "base/error.h"

namespace zen::spec {

Verdict Verifier::verify(Sampler& sampler, const float* rows, int64_t vocab, std::span<const int32_t> draft,
                         std::span<const float> q, const EmitFn& emit) {
  ZEN_CHECK(q.empty() || static_cast<int64_t>(q.size()) == static_cast<int64_t>(draft.size()) * vocab,
            "draft probabilities: ", q.size(), " floats for ", draft.size(), " drafts of vocabulary ", vocab);
  if (synthetic()) return verify_synthetic(sampler, rows, vocab, draft, emit);
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

void Verifier::set_synthetic(std::vector<double> rates, uint64_t seed) {
  synthetic_.clear();
  double before = 1;
  for (const double r : rates) {
    ZEN_CHECK(r >= 0 && r <= before, "synthetic acceptance rates must be non-increasing in [0, 1]");
    synthetic_.push_back(before > 0 ? r / before : 0);
    before = r;
  }
  synthetic_state_ = seed;
}

Verdict Verifier::verify_synthetic(Sampler& sampler, const float* rows, int64_t vocab, std::span<const int32_t> draft,
                                   const EmitFn& emit) {
  auto uniform = [this] {  // splitmix64 -> [0, 1)
    uint64_t z = (synthetic_state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  Verdict v;
  scratch_.resize(static_cast<size_t>(vocab));
  for (size_t j = 0; j <= draft.size(); ++j) {
    const double rate = synthetic_[std::min(j, synthetic_.size() - 1)];
    int32_t token = 0;
    const bool accept = j < draft.size() && uniform() < rate;
    if (accept) {
      token = draft[j];
    } else {
      const float* row = rows + static_cast<int64_t>(j) * vocab;
      std::copy(row, row + vocab, scratch_.begin());
      token = sampler.sample(scratch_.data(), vocab);
    }
    sampler.accept(token);
    ++v.emitted;
    v.accepted += accept ? 1 : 0;
    if (!emit(token, static_cast<int64_t>(j)) || !accept) return v;
  }
  return v;
}

}  // namespace zen::spec
