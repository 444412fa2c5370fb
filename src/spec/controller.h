// The adaptive speculation controller: per step and per sequence it picks how many drafted
// tokens to verify (0 = none), from measured quantities only, to maximise the batch's expected
// emitted tokens per second.
//
// Control law. A sequence verifying k drafts emits E(k) = 1 + sum_{j=1..k} prod_{i<=j} a_i
// tokens, where a_i is its acceptance rate at draft position i given the earlier ones were
// accepted (fading counts per request, shrunk towards all requests' rate; see Acceptance). A step
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
  static constexpr double kCostWeight = 0.05;
  static int bucket(int64_t tokens);
  static int64_t bucket_tokens(int b);
  std::array<double, kBuckets> seconds_{};
  std::array<int32_t, kBuckets> samples_{};  // 0: not measured
  int measured_ = 0;
};

struct ControllerOptions {
  bool adaptive = true;           // false: always verify num_speculative_tokens (if drafted)
  int32_t num_speculative_tokens = 5;
  double prior_acceptance = 0.6;  // a_0 before anything was measured
};

// Per-position acceptance: a_i = (accepted_i + m x prior_i) / (verified_i + m), from counts
// that fade by `forget` at every verification, at every position, reached or not (so a
// request's change of pace is followed, and an old rejection at a depth it no longer drafts
// to does not hold it back for good), with kPseudoCount = m. A request's prior at position 0 is what all requests show
// there; deeper, its own estimate one position up: a draft that held to depth i tends to hold
// further (a copy), so unexplored depth is extrapolated rather than assumed to fail, and a
// position seen a few times counts for little against it, so a short lucky streak is not
// bet on as if it were the rate.
struct Acceptance {
  static constexpr double kPseudoCount = 2.0;
  std::array<float, kMaxDraftTokens> accepted{}, verified{};
  void update(int32_t drafted, int32_t accepted_count, double forget);
  // a_0 .. a_{n-1}, from prior0 at position 0 then chained.
  void rates(double prior0, std::span<double> out) const;
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
  // (back to kFirstProbe once one is accepted). A probe is also paid for: each idle step puts
  // kProbeShare of the sequence's share of the step's time aside (the step's predicted time
  // over its sequences), and a probe waits until that covers what one more token adds to the
  // step, what one more sequence adds to the proposer's call, and the proposer's catch-up on
  // the idle stretch (a draft model's, on a CPU, grows faster than the savings: a sequence it
  // left is not probed again; new ones start from all requests' rates). Alone on a CPU (a 2-token step 1.3-1.6 plain ones) that is about the backoff's own
  // pace; in a compute-bound batch, where a draft costs about what a sequence's own token does,
  // it holds probes to kProbeShare of the time (16 sequences whose probes were accepted every
  // other time spent 7% of a compute-bound CPU's time on them; the closed-loop simulation's
  // worst case at 16 sequences rose from 0.978x to 0.983x plain decoding).
  static constexpr int32_t kFirstProbe = 8;
  static constexpr int32_t kMaxProbeInterval = 128;
  static constexpr double kProbeShare = 0.04;
  // How fast acceptance counts fade (per verification at a position): a request follows its
  // own change of pace within about 10 verifications; all requests' rates within about 200.
  static constexpr double kRequestForget = 0.9;
  static constexpr double kGlobalForget = 0.995;
  // Calibration. The rates a draft is verified on are those that looked good, so they run
  // high (a request's estimate peaks right after its luckiest drafts, and on a CPU a draft
  // pays only on a high one). Over the controller's verifications, the drafts accepted are
  // set against those expected, both fading by kCalibrationForget a verification, and every
  // gain is scaled by their ratio when it is below 1.
  static constexpr double kCalibrationForget = 0.98;
  double calibration() const { return std::min(1.0, bet_realised_ / bet_expected_); }
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
    bets_.erase(seq_id);
  }
  const StepCostModel& cost() const { return cost_; }
  // A request's estimated acceptance by position (the first n).
  std::vector<double> acceptance(uint64_t seq_id, int32_t n = kMaxDraftTokens) const;
  // The mean k of the last step that had candidates (the metrics' gauge).
  double mean_k() const { return mean_k_; }

 private:
  ControllerOptions o_;
  StepCostModel cost_;
  // Acceptance is kept apart by how the request's previous verification ended (index 1: all
  // of its drafts accepted; 0: one rejected, or none yet). Drafts come right in runs (a copy
  // holds for a while, then the text departs from it), so what just happened predicts the
  // next draft: a request drafts deep while a copy holds and stops as soon as it breaks,
  // where one average over both would do neither.
  struct History {
    std::array<Acceptance, 2> after;
    bool last_full = false;
  };
  std::array<Acceptance, 2> global_;
  std::unordered_map<uint64_t, History> per_seq_;
  struct Probe {
    int32_t idle = 0;                  // steps with room but no drafts since the last verification
    int32_t interval = kFirstProbe;    // idle steps before the next probe
    double saved = 0;                  // seconds put aside for the next probe
    bool pending = false;              // asked for a probe's draft this step
  };
  std::unordered_map<uint64_t, Probe> probes_;
  struct Bet {
    int32_t k = 0;          // drafts the controller verifies
    double expected = 0;    // of them accepted, by the uncalibrated rates
  };
  std::unordered_map<uint64_t, Bet> bets_;
  double bet_expected_ = 5, bet_realised_ = 5;  // start at 1: no evidence of bias yet
  // After the greedy allocation: gives due sequences their probe (room: each one's max_k in).
  // step_tokens: the step's tokens with the drafts allotted; drafting / longest: the sequences
  // allotted drafts and the most any was allotted. proposer_seconds: the first call of a step
  // (asking for drafts) passes it, the second (drafts in hand) passes none.
  void probe(std::span<Candidate> cands, std::span<const int32_t> room, int64_t draft_budget, int64_t step_tokens,
             const ProposerCost* proposer_seconds, int64_t drafting, int32_t longest);
  double mean_k_ = 0;
};

}  // namespace zen::spec
