#include "spec/controller.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>

#include "base/error.h"

namespace zen::spec {

// ---- StepCostModel ----

int StepCostModel::bucket(int64_t tokens) {
  if (tokens <= 64) return static_cast<int>(std::max<int64_t>(tokens, 1) - 1);
  int b = 64;
  for (int64_t t = 128; t < tokens && b + 1 < kBuckets; t *= 2) ++b;
  return b;  // (64, 128] -> 64, (128, 256] -> 65, ...
}

int64_t StepCostModel::bucket_tokens(int b) { return b < 64 ? b + 1 : int64_t{128} << (b - 64); }

void StepCostModel::record(int64_t tokens, double seconds) {
  if (tokens <= 0 || !(seconds > 0)) return;
  const int b = bucket(tokens);
  // Beyond 64 a bucket spans a range: store the time scaled to the bucket's top.
  const double s = seconds * static_cast<double>(bucket_tokens(b)) / static_cast<double>(std::max<int64_t>(tokens, 1));
  const double at = b < 64 ? seconds : s;
  // The mean of a bucket's samples, then a moving average over about the last 1 / kCostWeight
  // (a step's time jitters; a noisy estimate would make some step size look cheap by chance).
  const auto u = static_cast<size_t>(b);
  samples_[u] = std::min(samples_[u] + 1, 1 << 20);
  const double w = std::max(1.0 / samples_[u], kCostWeight);
  seconds_[u] += w * (at - seconds_[u]);
  ++measured_;
}

double StepCostModel::predict(int64_t tokens) const {
  if (measured_ == 0) return 0;
  tokens = std::max<int64_t>(tokens, 1);
  int lo = -1, hi = -1;  // nearest measured buckets at or below / above
  for (int b = 0; b < kBuckets; ++b) {
    if (samples_[static_cast<size_t>(b)] == 0) continue;
    if (bucket_tokens(b) <= tokens) lo = b;
    else if (hi < 0) hi = b;
  }
  const auto t_of = [](int b) { return static_cast<double>(bucket_tokens(b)); };
  const auto x = static_cast<double>(tokens);
  // Below the smallest measured count, proportional: an unmeasured plain decode step looks
  // cheap, so speculation waits until it has been measured (it errs towards not drafting).
  if (lo < 0) return seconds_[static_cast<size_t>(hi)] * x / t_of(hi);
  if (hi < 0) return seconds_[static_cast<size_t>(lo)] * x / t_of(lo);
  // Between measured counts: a line fitted to the measured steps of 2 tokens or more within a
  // factor of 2 (weighted by their samples), so that the choice between step sizes compares
  // many measurements rather than two that jitter (the least of a few noisy buckets is
  // cheap by chance, and drafting towards it loses). One token is a kernel path of its own
  // (a CPU's 2-token step costs 1.3-1.9 one-token ones, then little more per token): never
  // part of the fit.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int b = 1; b < kBuckets; ++b) {
    const auto u = static_cast<size_t>(b);
    const double t = t_of(b);
    if (samples_[u] == 0 || ((t < x / 2 || t > 2 * x) && b != lo && b != hi)) continue;
    const double w = std::min<double>(samples_[u], 1 / kCostWeight);
    sw += w, sx += w * t, sy += w * seconds_[u], sxx += w * t * t, sxy += w * t * seconds_[u];
  }
  const double det = sw * sxx - sx * sx;
  if (tokens >= 2 && det > 1e-9 * sw * sxx) {
    const double slope = std::max(0.0, (sw * sxy - sx * sy) / det);
    return (sy - slope * sx) / sw + slope * x;
  }
  const double f = (x - t_of(lo)) / (t_of(hi) - t_of(lo));
  return seconds_[static_cast<size_t>(lo)] + f * (seconds_[static_cast<size_t>(hi)] - seconds_[static_cast<size_t>(lo)]);
}

std::string StepCostModel::describe() const {
  std::string out;
  char item[64];
  for (int b = 0; b < kBuckets; ++b) {
    if (samples_[static_cast<size_t>(b)] == 0) continue;
    const double s = seconds_[static_cast<size_t>(b)];
    std::snprintf(item, sizeof item, "%s%lld: %.1f ms", out.empty() ? "" : ", ", static_cast<long long>(bucket_tokens(b)), s * 1e3);
    out += item;
  }
  return out;
}

// ---- Acceptance ----

void Acceptance::update(int32_t drafted, int32_t accepted_count, double forget) {
  // Positions 0..accepted-1 were accepted; position `accepted` (if drafted) was rejected;
  // later ones were never tried. Their counts fade too: evidence ages with the request's
  // verifications, not with its verifications that reached that depth, or one early rejection
  // at a depth the request then stops drafting to would hold the estimate there down for good
  // (seen: an edit drafting 1 token at a time, every one accepted, for 170 steps).
  const int32_t seen = std::min(std::min(accepted_count + 1, drafted), kMaxDraftTokens);
  for (int32_t i = 0; i < kMaxDraftTokens; ++i) {
    const auto u = static_cast<size_t>(i);
    verified[u] = static_cast<float>(forget * verified[u] + (i < seen ? 1.0 : 0.0));
    accepted[u] = static_cast<float>(forget * accepted[u] + (i < accepted_count ? 1.0 : 0.0));
  }
}

void Acceptance::rates(double prior0, std::span<double> out) const {
  double prior = prior0;
  for (size_t i = 0; i < out.size() && i < static_cast<size_t>(kMaxDraftTokens); ++i) {
    out[i] = (accepted[i] + kPseudoCount * prior) / (verified[i] + kPseudoCount);
    prior = out[i];
  }
}

// ---- Controller ----

namespace {
// The drafts a step's candidates are allotted in all.
int64_t drafts_of(std::span<const Controller::Candidate> cands) {
  int64_t total = 0;
  for (const Controller::Candidate& c : cands) total += c.max_k;
  return total;
}
}  // namespace

Controller::Controller(const ControllerOptions& options) : o_(options) {
  if (o_.num_speculative_tokens < 1 || o_.num_speculative_tokens > kMaxDraftTokens)
    fail("num_speculative_tokens must be in [1, ", kMaxDraftTokens, "], got ", o_.num_speculative_tokens);
}

std::vector<double> Controller::acceptance(uint64_t seq_id, int32_t n) const {
  n = std::clamp(n, 0, kMaxDraftTokens);
  static const History kFresh;
  const auto it = per_seq_.find(seq_id);
  const History& h = it == per_seq_.end() ? kFresh : it->second;
  double global0 = 0;  // all requests' rate at position 0, this request's prior there
  global_[h.last_full].rates(o_.prior_acceptance, std::span<double>(&global0, 1));
  std::vector<double> out(static_cast<size_t>(n));
  h.after[h.last_full].rates(global0, out);
  return out;
}

void Controller::record_verify(uint64_t seq_id, int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  if (const auto b = bets_.find(seq_id); b != bets_.end()) {
    if (b->second.k > 0) {
      bet_expected_ = kCalibrationForget * bet_expected_ + b->second.expected;
      bet_realised_ = kCalibrationForget * bet_realised_ + std::min(accepted, b->second.k);
    }
    bets_.erase(b);
  }
  History& h = per_seq_[seq_id];
  h.after[h.last_full].update(drafted, accepted, kRequestForget);
  global_[h.last_full].update(drafted, accepted, kGlobalForget);
  h.last_full = accepted == drafted;
  Probe& p = probes_[seq_id];
  if (accepted > 0) p.interval = kFirstProbe;
}

void Controller::choose(std::span<Candidate> cands, int64_t other_tokens, int64_t draft_budget,
                        const ProposerCost& proposer_seconds) {
  if (cands.empty()) return;
  for (Candidate& c : cands) c.max_k = std::clamp(c.max_k, 0, std::min(o_.num_speculative_tokens, kMaxDraftTokens));
  std::vector<int32_t> room(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) room[i] = cands[i].max_k;
  if (!o_.adaptive) {  // pinned k, within the token budget
    int64_t total = 0;
    for (Candidate& c : cands) {
      c.max_k = static_cast<int32_t>(std::clamp<int64_t>(draft_budget - total, 0, c.max_k));
      total += c.max_k;
    }
    mean_k_ = static_cast<double>(total) / static_cast<double>(cands.size());
    return;
  }
  // Walk the greedy path: each step adds the draft token of highest expected gain.
  struct Next {
    double gain;
    size_t cand;
    bool operator<(const Next& o) const { return gain < o.gain || (gain == o.gain && cand > o.cand); }
  };
  std::vector<std::vector<double>> acc(cands.size());
  std::vector<double> cumulative(cands.size(), 1.0);
  std::vector<int32_t> k(cands.size(), 0);
  std::priority_queue<Next> heap;
  const double scale = calibration();
  for (size_t i = 0; i < cands.size(); ++i) {
    if (cands[i].max_k <= 0) continue;
    acc[i] = acceptance(cands[i].seq_id, cands[i].max_k);
    heap.push({scale * acc[i][0], i});  // the scale carries down each sequence's product
  }
  const int64_t base_tokens = other_tokens + static_cast<int64_t>(cands.size());
  double emitted = static_cast<double>(cands.size());
  const double base_time = cost_.predict(base_tokens);
  double best_rate = base_time > 0 ? emitted / base_time : 0;
  std::vector<size_t> order;  // the path
  std::vector<double> gains;  // and each draft token's expected gain on it
  size_t best_len = 0;
  int64_t drafting = 0;
  int32_t longest = 0;
  // Per step share of the candidates' one-off costs: one_off x E / horizon (E: what the
  // sequence emits a step with its drafts so far).
  double one_off_share = 0;
  auto per_token_one_off = [&](size_t i) {
    const int64_t horizon = std::clamp<int64_t>(cands[i].horizon_tokens, 1, kHorizonTokens);
    return cands[i].one_off_seconds / static_cast<double>(horizon);
  };
  while (!heap.empty() && static_cast<int64_t>(order.size()) < draft_budget && base_time > 0) {
    const Next n = heap.top();
    heap.pop();
    const size_t i = n.cand;
    emitted += n.gain;
    cumulative[i] = n.gain;
    one_off_share += per_token_one_off(i) * (k[i] == 0 ? 1.0 + n.gain : n.gain);
    drafting += k[i] == 0 ? 1 : 0;
    ++k[i];
    longest = std::max(longest, k[i]);
    order.push_back(i);
    gains.push_back(n.gain);
    if (k[i] < cands[i].max_k) heap.push({cumulative[i] * acc[i][static_cast<size_t>(k[i])], i});
    const double extra = proposer_seconds ? proposer_seconds(drafting, longest) : 0.0;
    const double rate = emitted / (cost_.predict(base_tokens + static_cast<int64_t>(order.size())) + extra + one_off_share);
    if (rate > best_rate) {
      best_rate = rate;
      best_len = order.size();
    }
  }
  for (Candidate& c : cands) c.max_k = 0;
  for (size_t s = 0; s < best_len; ++s) ++cands[order[s]].max_k;
  for (const Candidate& c : cands) bets_[c.seq_id] = {c.max_k, 0.0};
  for (size_t s = 0; s < best_len; ++s) bets_[cands[order[s]].seq_id].expected += gains[s] / scale;
  if (base_time > 0) {
    int64_t drafted_seqs = 0;
    int32_t deepest = 0;
    for (const Candidate& c : cands) drafted_seqs += c.max_k > 0 ? 1 : 0, deepest = std::max(deepest, c.max_k);
    probe(cands, room, draft_budget, base_tokens + static_cast<int64_t>(best_len),
          proposer_seconds ? &proposer_seconds : nullptr, drafted_seqs, deepest);
  }
  mean_k_ = static_cast<double>(drafts_of(cands)) / static_cast<double>(cands.size());
}

// The first call of a step (asking) counts idle steps and asks due sequences for one draft; the
// second (drafts in hand) verifies it even where the allocation says no.
void Controller::probe(std::span<Candidate> cands, std::span<const int32_t> room, int64_t draft_budget,
                       int64_t step_tokens, const ProposerCost* proposer_seconds, int64_t drafting, int32_t longest) {
  const bool asking = proposer_seconds != nullptr;
  int64_t total = drafts_of(cands);
  // What a sequence's idle step puts aside, and what a probe costs: one token more in the
  // step, one more sequence in the proposer's call, and in full whatever the proposer must
  // first catch up on (a draft model reads every token of the idle stretch; on a CPU that
  // costs more than the target's extra token, and left out it made probes the whole loss).
  const double step_seconds = cost_.predict(step_tokens);
  const double set_aside = kProbeShare * step_seconds / static_cast<double>(cands.size());
  int64_t probes_added = 0;
  auto probe_cost = [&](const Candidate& c) {
    const int64_t n = step_tokens + probes_added;
    double cost = std::max(0.0, cost_.predict(n + 1) - cost_.predict(n)) + c.one_off_seconds;
    if (proposer_seconds && *proposer_seconds) {
      const int64_t seqs = drafting + probes_added;
      cost += std::max(0.0, (*proposer_seconds)(seqs + 1, std::max(longest, 1)) - (*proposer_seconds)(seqs, longest));
    }
    return cost;
  };
  for (size_t i = 0; i < cands.size(); ++i) {
    Candidate& c = cands[i];
    Probe& p = probes_[c.seq_id];
    if (c.max_k > 0) {
      p.idle = 0;
      p.pending = false;
      continue;
    }
    if (room[i] == 0 || total >= draft_budget) {
      p.pending = false;
      continue;
    }
    if (asking) {
      ++p.idle;
      p.saved += set_aside;
      if (p.idle >= p.interval && p.saved >= probe_cost(c)) {
        p.idle = 0;
        p.saved = 0;
        p.interval = std::min(2 * p.interval, kMaxProbeInterval);
        p.pending = true;
      }
    }
    if (p.pending) {
      c.max_k = 1;
      ++probes_added;
      // A probe counts towards the calibration too: without it, one that fell far enough
      // would draft nothing more and never learn that the estimates had become right.
      bets_[c.seq_id] = {1, acceptance(c.seq_id, 1)[0]};
      ++total;
      if (!asking) p.pending = false;
    }
  }
}

}  // namespace zen::spec
