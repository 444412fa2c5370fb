// The adaptive speculation controller: per step and per sequence it picks how many drafted
// tokens to verify (0 = none), from measured quantities only, to maximise the batch's expected
// emitted tokens per second.
//
// Control law. A sequence verifying k drafts emits E(k) = 1 + sum_{j=1..k} prod_{i<=j} a_i
// tokens, where a_i is its acceptance rate at draft position i given the earlier ones were
// accepted (a moving average per request, seeded from the proposer's global average). A step
// of n tokens takes T(n) seconds (its forward, then sampling and verifying its rows), learnt
// online from every step (StepCostModel). With D
// sequences decoding, the batch emits sum_s E(k_s) tokens in T(D + sum_s k_s) + C seconds (C the
// proposer's own measured cost). Each extra draft token adds the next factor of one sequence's
// product; taking them in decreasing order of that gain (every sequence's gains shrink with k)
// traces the best allocation for each total, and the controller keeps the total with the
// highest rate, or none when plain decoding is fastest. So a memory-bound step (T flat in n:
// one sequence, a CPU or GPU with spare compute) drafts long where acceptance is high, while a
// compute-bound one (T growing with n: many sequences) turns speculation off unless acceptance
// is near 1. Costs and acceptance are re-measured all the time, so it follows the load. A
// sequence whose drafter must first catch up (a draft model reading a long prompt) starts
// drafting only when the expected gain over its remaining tokens pays for that too.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace zen::spec {

inline constexpr int32_t kMaxDraftTokens = 32;

// Seconds of a forward pass as a function of its token count: a moving average per bucket
// (exact counts up to 64, then powers of two), interpolated linearly between measured buckets
// and extrapolated proportionally outside them: a step larger than any measured looks
// expensive, one smaller than any measured looks cheap, both of which err towards plain
// decoding until the step was seen.
class StepCostModel {
 public:
  void record(int64_t tokens, double seconds);
  double predict(int64_t tokens) const;  // 0 before anything was measured
  bool empty() const { return measured_ == 0; }
  // The measured buckets, e.g. "1: 18.5 ms, 17: 70.1 ms, 512: 2.4 s" (zen run's summary).
  std::string describe() const;

 private:
  static constexpr int kBuckets = 64 + 20;
  static int bucket(int64_t tokens);
  static int64_t bucket_tokens(int b);
  std::array<double, kBuckets> seconds_{};
  std::array<bool, kBuckets> known_{};
  int measured_ = 0;
};

struct ControllerOptions {
  bool adaptive = true;           // false: always verify num_speculative_tokens (if drafted)
  int32_t num_speculative_tokens = 5;
  double prior_acceptance = 0.6;  // a_i before anything was measured
  bool deepen = true;             // Controller::kMinDeepenFrom (off: Proposer::drafts_extend_with_k)
};

// Per-position acceptance: a_i as a moving average, for a request or for all of them.
// Positions never tried take the deepest tried one's rate: a lookup's draft tends to be right
// all the way or wrong early, so depth is explored rather than assumed to fail.
struct Acceptance {
  std::array<float, kMaxDraftTokens> rate{};
  int32_t tried = 0;  // positions 0 .. tried-1 have been verified at least once
  int32_t verified = 0;  // verifications seen (a request's first ones weigh more)
  void fill(double a) { rate.fill(static_cast<float>(a)); }
  void update(int32_t drafted, int32_t accepted, double weight);
  float at(int32_t i) const { return rate[static_cast<size_t>(tried > 0 && i >= tried ? tried - 1 : i)]; }
};

class Controller {
 public:
  explicit Controller(const ControllerOptions& options);
  const ControllerOptions& options() const { return o_; }

  struct Candidate {
    uint64_t seq_id = 0;
    int32_t max_k = 0;  // in: drafts available (or allowed); out: how many to verify
    // One-off seconds drafting for it would cost first (a draft model's catch-up on a prompt
    // its cache lacks), spread over the tokens it has left to emit, at most kHorizonTokens: a
    // sequence emitting E tokens a step pays one_off x E / horizon of it per step.
    double one_off_seconds = 0;
    int64_t horizon_tokens = 0;
  };
  // Tokens a one-off cost is spread over at most: a request's max_tokens is only a bound on
  // what it emits (most stop earlier), so a long one does not make any catch-up look free.
  static constexpr int64_t kHorizonTokens = 256;
  // Probing. A sequence the controller leaves without drafts would never show that its
  // acceptance changed (a request that starts copying its prompt, after a warm-up on prose
  // taught the global average to expect nothing): after kFirstProbe steps without drafts it
  // verifies one draft anyway, and the wait doubles after each probe up to kMaxProbeInterval
  // (back to kFirstProbe once one is accepted). At zero acceptance that costs one extra token
  // in a step about every 8, 16, 32, ... steps: under 1.5% of a 256-token request's steps on a
  // CPU where a 2-token step costs 1.6 plain ones.
  static constexpr int32_t kFirstProbe = 8;
  static constexpr int32_t kMaxProbeInterval = 128;
  // Deepening. Depths a request never verified take its deepest verified one's rate, and a
  // lookup's conditional acceptance grows with depth (a copy that held for 4 tokens tends to
  // hold for 16), so the allocation can settle at a depth it never looks past. After a
  // verification that accepted all of at least kMinDeepenFrom drafts (a copy, not a lucky
  // short guess: on a CPU every verified token costs, so exploring after those lost 14% on
  // the code pack), a sequence whose allocation is no deeper verifies twice as many once; an
  // attempt that is not fully accepted doubles the wait before the next (up to
  // kMaxDeepenInterval verifications), a fully accepted one resets it.
  static constexpr int32_t kMinDeepenFrom = 4;
  static constexpr int32_t kMaxDeepenInterval = 64;
  // Chooses k for every candidate of one step. other_tokens: tokens the step carries besides
  // the candidates' own last tokens (prefill chunks, decodes without drafts); draft_budget
  // caps the sum of k. proposer_seconds(seqs, k): the proposer's cost for `seqs` sequences
  // drafting up to k tokens (pass none once the drafts exist: their cost is sunk).
  using ProposerCost = std::function<double(int64_t seqs, int32_t k)>;
  void choose(std::span<Candidate> cands, int64_t other_tokens, int64_t draft_budget,
              const ProposerCost& proposer_seconds = nullptr);

  // Measurements: a forward's duration, and the outcome of one sequence's verification.
  void record_step(int64_t tokens, double seconds) { cost_.record(tokens, seconds); }
  void record_verify(uint64_t seq_id, int32_t drafted, int32_t accepted);
  void forget(uint64_t seq_id) {
    per_seq_.erase(seq_id);
    probes_.erase(seq_id);
  }
  const StepCostModel& cost() const { return cost_; }
  const Acceptance& acceptance(uint64_t seq_id);
  // The mean k of the last step that had candidates (the metrics' gauge).
  double mean_k() const { return mean_k_; }

 private:
  ControllerOptions o_;
  StepCostModel cost_;
  Acceptance global_;
  std::unordered_map<uint64_t, Acceptance> per_seq_;
  struct Probe {
    int32_t idle = 0;                  // steps with room but no drafts since the last verification
    int32_t interval = kFirstProbe;    // idle steps before the next probe
    bool pending = false;              // asked for a probe's draft this step
    int32_t last_full = 0;             // drafts of the last verification if all were accepted
    int32_t deepen_wait = 0;           // fully accepted verifications since the last deepening
    int32_t deepen_interval = 1;       // ... before the next one
    int32_t deepen_to = 0;             // asked for this many drafts this step (deepening)
    bool deepening = false;            // the verification in flight is a deepening
  };
  std::unordered_map<uint64_t, Probe> probes_;
  // After the greedy allocation: gives due sequences their probe (room: each one's max_k in).
  void probe(std::span<Candidate> cands, std::span<const int32_t> room, int64_t draft_budget, bool asking);
  // After the greedy allocation: deepens sequences due for it (see kMaxDeepenInterval).
  void deepen(std::span<Candidate> cands, std::span<const int32_t> room, int64_t draft_budget, bool asking);
  double mean_k_ = 0;
};

}  // namespace zen::spec
