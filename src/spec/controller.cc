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
  seconds_[static_cast<size_t>(b)] = known_[static_cast<size_t>(b)] ? 0.8 * seconds_[static_cast<size_t>(b)] + 0.2 * at : at;
  known_[static_cast<size_t>(b)] = true;
  ++measured_;
}

double StepCostModel::predict(int64_t tokens) const {
  if (measured_ == 0) return 0;
  tokens = std::max<int64_t>(tokens, 1);
  int lo = -1, hi = -1;  // nearest measured buckets at or below / above
  for (int b = 0; b < kBuckets; ++b) {
    if (!known_[static_cast<size_t>(b)]) continue;
    if (bucket_tokens(b) <= tokens) lo = b;
    else if (hi < 0) hi = b;
  }
  const auto t_of = [](int b) { return static_cast<double>(bucket_tokens(b)); };
  const auto x = static_cast<double>(tokens);
  // Below the smallest measured count, proportional: an unmeasured plain decode step looks
  // cheap, so speculation waits until it has been measured (it errs towards not drafting).
  if (lo < 0) return seconds_[static_cast<size_t>(hi)] * x / t_of(hi);
  if (hi < 0) return seconds_[static_cast<size_t>(lo)] * x / t_of(lo);
  const double f = (x - t_of(lo)) / (t_of(hi) - t_of(lo));
  return seconds_[static_cast<size_t>(lo)] + f * (seconds_[static_cast<size_t>(hi)] - seconds_[static_cast<size_t>(lo)]);
}

std::string StepCostModel::describe() const {
  std::string out;
  char item[64];
  for (int b = 0; b < kBuckets; ++b) {
    if (!known_[static_cast<size_t>(b)]) continue;
    const double s = seconds_[static_cast<size_t>(b)];
    std::snprintf(item, sizeof item, "%s%lld: %.1f ms", out.empty() ? "" : ", ", static_cast<long long>(bucket_tokens(b)), s * 1e3);
    out += item;
  }
  return out;
}

// ---- Acceptance ----

void Acceptance::update(int32_t drafted, int32_t accepted, double weight) {
  // Positions 0..accepted-1 were accepted; position `accepted` (if drafted) was rejected;
  // later ones were never tried.
  const int32_t seen = std::min(std::min(accepted + 1, drafted), kMaxDraftTokens);
  for (int32_t i = 0; i < seen; ++i) {
    float& r = rate[static_cast<size_t>(i)];
    if (i >= tried) r = at(i);  // first sample at this depth: start from the extrapolation
    r += static_cast<float>(weight) * ((i < accepted ? 1.0f : 0.0f) - r);
  }
  tried = std::max(tried, seen);
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
  global_.fill(o_.prior_acceptance);
}

const Acceptance& Controller::acceptance(uint64_t seq_id) {
  auto [it, fresh] = per_seq_.try_emplace(seq_id);
  if (fresh) {  // between the global average and the prior, so a change of workload is noticed
    it->second = global_;
    for (float& r : it->second.rate) r = 0.5f * (r + static_cast<float>(o_.prior_acceptance));
  }
  return it->second;
}

void Controller::record_verify(uint64_t seq_id, int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  acceptance(seq_id);  // seeds a new request's rates
  Acceptance& a = per_seq_[seq_id];
  // A request's first verifications weigh more (1/2, 1/3, then 1/4 each): its start was a
  // guess, and a probe that succeeds should let it draft at once.
  a.update(drafted, accepted, std::max(0.25, 1.0 / (a.verified + 2)));
  ++a.verified;
  global_.update(drafted, accepted, 0.05);
  Probe& p = probes_[seq_id];
  if (accepted > 0) p.interval = kFirstProbe;
  p.last_full = accepted == drafted ? drafted : 0;
  if (p.deepening) p.deepen_interval = accepted == drafted ? 1 : std::min(2 * p.deepen_interval, kMaxDeepenInterval);
  p.deepening = false;
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
  std::vector<const Acceptance*> acc(cands.size());
  std::vector<double> cumulative(cands.size(), 1.0);
  std::vector<int32_t> k(cands.size(), 0);
  std::priority_queue<Next> heap;
  for (size_t i = 0; i < cands.size(); ++i) {
    acc[i] = &acceptance(cands[i].seq_id);
    if (cands[i].max_k > 0) heap.push({acc[i]->at(0), i});
  }
  const int64_t base_tokens = other_tokens + static_cast<int64_t>(cands.size());
  double emitted = static_cast<double>(cands.size());
  const double base_time = cost_.predict(base_tokens);
  double best_rate = base_time > 0 ? emitted / base_time : 0;
  std::vector<size_t> order;  // the path
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
    if (k[i] < cands[i].max_k) heap.push({cumulative[i] * acc[i]->at(k[i]), i});
    const double extra = proposer_seconds ? proposer_seconds(drafting, longest) : 0.0;
    const double rate = emitted / (cost_.predict(base_tokens + static_cast<int64_t>(order.size())) + extra + one_off_share);
    if (rate > best_rate) {
      best_rate = rate;
      best_len = order.size();
    }
  }
  for (Candidate& c : cands) c.max_k = 0;
  for (size_t s = 0; s < best_len; ++s) ++cands[order[s]].max_k;
  if (base_time > 0) {
    if (o_.deepen) deepen(cands, room, draft_budget, proposer_seconds != nullptr);
    probe(cands, room, draft_budget, proposer_seconds != nullptr);
  }
  mean_k_ = static_cast<double>(drafts_of(cands)) / static_cast<double>(cands.size());
}

// The first call of a step (asking) decides and asks for the deeper drafts; the second verifies
// what came of them.
void Controller::deepen(std::span<Candidate> cands, std::span<const int32_t> room, int64_t draft_budget, bool asking) {
  int64_t total = drafts_of(cands);
  for (size_t i = 0; i < cands.size(); ++i) {
    Candidate& c = cands[i];
    Probe& p = probes_[c.seq_id];
    if (asking) {
      p.deepen_to = 0;
      if (c.max_k == 0 || p.last_full < kMinDeepenFrom || c.max_k > p.last_full || room[i] <= c.max_k) continue;
      if (++p.deepen_wait < p.deepen_interval) continue;
      p.deepen_wait = 0;
      p.deepen_to = std::min(room[i], 2 * std::max(c.max_k, p.last_full));
    }
    if (p.deepen_to <= c.max_k) continue;
    const auto extra = static_cast<int32_t>(std::clamp<int64_t>(draft_budget - total, 0, std::min(p.deepen_to, room[i]) - c.max_k));
    c.max_k += extra;
    total += extra;
    if (!asking && extra > 0) p.deepening = true;
  }
}

// The first call of a step (asking) counts idle steps and asks due sequences for one draft; the
// second (drafts in hand) verifies it even where the allocation says no.
void Controller::probe(std::span<Candidate> cands, std::span<const int32_t> room, int64_t draft_budget, bool asking) {
  int64_t total = drafts_of(cands);
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
    if (asking && ++p.idle >= p.interval) {
      p.idle = 0;
      p.interval = std::min(2 * p.interval, kMaxProbeInterval);
      p.pending = true;
    }
    if (p.pending) {
      c.max_k = 1;
      ++total;
      if (!asking) p.pending = false;
    }
  }
}

}  // namespace zen::spec
