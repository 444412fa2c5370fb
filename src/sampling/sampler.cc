#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "grammar/matcher.h"
#include "kernels/cpu/ops.h"

namespace zen {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    fail("temperature must be >= 0, got ", temperature);
  if (top_k < 0) fail("top_k must be >= 0 (0 disables it), got ", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p must be in [0, 1], got ", min_p);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    fail("repetition_penalty must be > 0, got ", repetition_penalty);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    fail("presence_penalty must be in [-2, 2], got ", presence_penalty);
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    fail("frequency_penalty must be in [-2, 2], got ", frequency_penalty);
  if (logit_bias.size() > kMaxLogitBias) fail("logit_bias may hold at most ", kMaxLogitBias, " tokens, got ", logit_bias.size());
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0) fail("logit_bias: token id ", token, " is negative");
    if (!(bias >= -100.0f && bias <= 100.0f)) fail("logit_bias: the bias of token ", token, " must be in [-100, 100], got ", bias);
  }
}

int32_t argmax(const float* logits, int64_t vocab) {
  return static_cast<int32_t>(kernels::argmax_f32(logits, vocab));  // first maximum wins, as torch.argmax
}

Sampler::Sampler(const SamplingParams& params, std::span<const int32_t> prompt) : p_(params) {
  p_.validate();
  rng_.seed(p_.has_seed ? p_.seed : std::random_device{}());
  for (int32_t t : prompt)
    if (!seen_set_[t]) {
      seen_set_[t] = true;
      seen_.push_back(t);
    }
}

Sampler::~Sampler() = default;

void Sampler::set_grammar(std::unique_ptr<grammar::Matcher> matcher) { grammar_ = std::move(matcher); }

void Sampler::apply_grammar(float* logits, int64_t vocab) const {
  const auto& g = grammar_->compiled().vocab();
  mask_.resize(static_cast<size_t>(g.size() + 63) / 64);
  grammar_->fill_mask(mask_);
  bool any = false;
  for (uint64_t w : mask_) any = any || w != 0;
  if (!any)  // nothing but ending is possible (e.g. ignore_eos past the grammar's end)
    for (int32_t t : g.stop_ids()) mask_[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t covered = std::min<int64_t>(vocab, static_cast<int64_t>(mask_.size()) * 64);
  for (int64_t w = 0; w * 64 < covered; ++w) {
    const uint64_t bits = mask_[static_cast<size_t>(w)];
    if (bits == ~uint64_t{0}) continue;
    const int64_t end = std::min<int64_t>(covered, (w + 1) * 64);
    for (int64_t t = w * 64; t < end; ++t)
      if (!((bits >> (t & 63)) & 1)) logits[t] = kNegInf;
  }
  for (int64_t t = covered; t < vocab; ++t) logits[t] = kNegInf;
}

void Sampler::accept(int32_t token) {
  if (grammar_) grammar_->advance(token);  // false only for a token outside the mask: none is sampled
  ++output_counts_[token];
  if (!seen_set_[token]) {
    seen_set_[token] = true;
    seen_.push_back(token);
  }
}

void Sampler::adjust_logits(float* logits, int64_t vocab) const {
  for (const auto& [token, bias] : p_.logit_bias)
    if (token < vocab) logits[token] += bias;
  if (p_.repetition_penalty != 1.0f) {
    for (int32_t t : seen_) {
      if (t < 0 || t >= vocab) continue;
      float& l = logits[t];
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    }
  }
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    for (const auto& [t, count] : output_counts_) {
      if (t < 0 || t >= vocab) continue;
      logits[t] -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(count);
    }
  }
  if (grammar_) apply_grammar(logits, vocab);
}

int32_t Sampler::sample(float* logits, int64_t vocab) {
  if (greedy()) {
    adjust_logits(logits, vocab);
    return argmax(logits, vocab);
  }
  return draw(distribution(logits, vocab));
}

std::span<const TokenProb> Sampler::distribution(float* logits, int64_t vocab) {
  adjust_logits(logits, vocab);
  dist_.clear();
  if (greedy()) {
    dist_.push_back({argmax(logits, vocab), 1.0});
    return dist_;
  }
  // Candidates sorted by logit, cut by top-k first (cheap partial sort).
  candidates_.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) candidates_[static_cast<size_t>(i)] = {logits[i], static_cast<int32_t>(i)};
  size_t keep = candidates_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) keep = static_cast<size_t>(p_.top_k);
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(keep), candidates_.end(), by_logit);
  // Tokens a grammar forbids (-inf) are never candidates, not even as a rounding sliver.
  while (keep > 1 && candidates_[keep - 1].first == -std::numeric_limits<float>::infinity()) --keep;

  // Softmax at temperature over the kept candidates.
  const double max_logit = candidates_[0].first;
  double sum = 0;
  dist_.resize(keep);
  for (size_t i = 0; i < keep; ++i) {
    dist_[i] = {candidates_[i].second, std::exp((static_cast<double>(candidates_[i].first) - max_logit) / p_.temperature)};
    sum += dist_[i].p;
  }
  for (TokenProb& t : dist_) t.p /= sum;

  // top-p: smallest prefix whose mass reaches top_p (always at least one token).
  size_t cut = keep;
  if (p_.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += dist_[i].p;
      if (mass >= p_.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  // min-p: drop tokens below min_p x the top probability.
  if (p_.min_p > 0.0f) {
    const double floor_p = p_.min_p * dist_[0].p;
    size_t i = 1;
    while (i < cut && dist_[i].p >= floor_p) ++i;
    cut = i;
  }
  dist_.resize(cut);
  double total = 0;
  for (const TokenProb& t : dist_) total += t.p;
  for (TokenProb& t : dist_) t.p /= total;
  return dist_;
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

int32_t Sampler::draw(std::span<const TokenProb> dist, double total) {
  double r = uniform() * total;
  for (const TokenProb& t : dist) {
    r -= t.p;
    if (r <= 0) return t.token;
  }
  return dist.back().token;  // rounding left a sliver past the last entry
}

}  // namespace zen
