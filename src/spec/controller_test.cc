// The adaptive controller's law on synthetic costs: long drafts where a step is memory-bound
// and acceptance high, none where it is compute-bound and acceptance middling, pinned k when
// not adaptive, budgets respected; the cost model's interpolation and extrapolation.
#include "spec/controller.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <vector>

#include "base/error.h"

namespace zen::spec {
namespace {

// A step of n tokens costs fixed + per_token x n seconds.
void teach(Controller& c, double fixed, double per_token) {
  for (const int64_t n : {1, 2, 4, 8, 16, 17, 32, 64, 65, 128, 512})
    c.record_step(n, fixed + per_token * static_cast<double>(n));
}

std::vector<Controller::Candidate> candidates(int n, int32_t max_k) {
  std::vector<Controller::Candidate> c;
  for (int i = 0; i < n; ++i) c.push_back({static_cast<uint64_t>(i + 1), max_k});
  return c;
}

// Feeds `rounds` verifications of k drafts with `accepted` accepted to each candidate.
void observe(Controller& c, const std::vector<Controller::Candidate>& cands, int32_t k, int32_t accepted, int rounds) {
  for (int r = 0; r < rounds; ++r)
    for (const auto& cand : cands) c.record_verify(cand.seq_id, k, accepted);
}

TEST(StepCostModel, InterpolatesAndExtrapolatesTowardsPlainDecoding) {
  StepCostModel m;
  EXPECT_EQ(m.predict(5), 0.0);
  m.record(4, 0.040);
  m.record(8, 0.080);
  EXPECT_DOUBLE_EQ(m.predict(6), 0.060);                   // between measured counts
  EXPECT_DOUBLE_EQ(m.predict(2), 0.020);                   // below: proportional (cheap)
  EXPECT_DOUBLE_EQ(m.predict(16), 0.160);                  // above: proportional (expensive)
  m.record(8, 0.180);                                      // the mean of a bucket's samples
  EXPECT_NEAR(m.predict(8), 0.130, 1e-12);
  for (int i = 0; i < 100; ++i) m.record(8, 0.100);        // then a moving average over about 20
  EXPECT_NEAR(m.predict(8), 0.100, 0.002);
  m.record(300, 3.0);                                      // buckets past 64 are powers of two
  EXPECT_NEAR(m.predict(512), 3.0 * 512 / 300, 1e-9);
  EXPECT_NE(m.describe().find("4: 40.0 ms"), std::string::npos);
}

// Steps of 2 tokens or more are read off a line fitted to the measured sizes nearby, so one
// size whose few samples ran fast by chance does not look cheap; a one-token step (a kernel
// path of its own) is never part of it.
TEST(StepCostModel, FitsALineThroughNoisySizes) {
  StepCostModel m;
  const auto line = [](int64_t n) { return 0.047 + 0.0088 * static_cast<double>(n - 1); };
  m.record(1, 0.037);
  for (int64_t n = 2; n <= 40; ++n) m.record(n, line(n) * (n % 2 == 0 ? 1.1 : 0.9));  // +-10%
  EXPECT_DOUBLE_EQ(m.predict(1), 0.037);
  for (const int64_t n : {17, 20, 24})
    EXPECT_NEAR(m.predict(n), line(n), 0.02 * line(n)) << n;  // each bucket alone is 10% off
  StepCostModel exact;  // on a line the fit is the line
  for (const int64_t n : {1, 2, 3, 4, 8}) exact.record(n, n == 1 ? 0.037 : line(n));
  EXPECT_DOUBLE_EQ(exact.predict(1), 0.037);
  EXPECT_NEAR(exact.predict(2), line(2), 1e-12);
  EXPECT_NEAR(exact.predict(6), line(6), 1e-12);
}

TEST(Controller, DraftsLongWhenAStepIsMemoryBoundAndAcceptanceHigh) {
  Controller c({.adaptive = true, .num_speculative_tokens = 16});
  teach(c, 0.050, 0.0005);  // a token more costs 1% of a decode step
  auto cands = candidates(1, 16);
  observe(c, cands, 8, 8, 10);  // everything accepted
  c.choose(cands, 0, 512);
  EXPECT_EQ(cands[0].max_k, 16);  // depth beyond 8 was never tried: extrapolated, not feared
  EXPECT_DOUBLE_EQ(c.mean_k(), 16.0);
}

TEST(Controller, TurnsItselfOffWhenComputeBoundAtMiddlingAcceptance) {
  Controller c({.adaptive = true, .num_speculative_tokens = 8});
  teach(c, 0.010, 0.004);  // 64 sequences: every token costs nearly as much as a step's share
  auto cands = candidates(64, 8);
  for (int r = 0; r < 10; ++r) observe(c, cands, 4, r % 2, 1);  // half the first drafts survive, none beyond
  c.choose(cands, 0, 4096);
  for (const auto& cand : cands) EXPECT_EQ(cand.max_k, 0);
  EXPECT_EQ(c.mean_k(), 0.0);
  // The same acceptance with one sequence and a flat step: worth drafting.
  Controller alone({.adaptive = true, .num_speculative_tokens = 8});
  teach(alone, 0.050, 0.0005);
  auto one = candidates(1, 8);
  for (int r = 0; r < 10; ++r) observe(alone, one, 4, r % 2, 1);
  alone.choose(one, 0, 512);
  EXPECT_GT(one[0].max_k, 0);
}

TEST(Controller, ProposerCostCountsAgainstDrafting) {
  Controller c({.adaptive = true, .num_speculative_tokens = 4});
  teach(c, 0.050, 0.002);
  auto cands = candidates(1, 4);
  observe(c, cands, 4, 2, 10);
  auto free_drafts = cands;
  c.choose(free_drafts, 0, 512);
  EXPECT_GT(free_drafts[0].max_k, 0);
  auto costly = cands;  // each drafted token costs as much as a decode step
  c.choose(costly, 0, 512, [](int64_t, int32_t k) { return 0.050 * k; });
  EXPECT_EQ(costly[0].max_k, 0);
}

TEST(Controller, AOneOffCatchUpMustPayForItselfOverTheTokensLeft) {
  // A CPU-like step (52 ms + 17.5 ms a token) and drafts whose first three tokens are always
  // right and fourth never: k = 3 emits 4 tokens a 122 ms step, worth it with nothing to catch
  // up first.
  auto chosen_k = [](double one_off, int64_t horizon) {
    Controller c({.adaptive = true, .num_speculative_tokens = 8});
    teach(c, 0.052, 0.0175);
    auto cands = candidates(1, 8);
    observe(c, cands, 4, 3, 20);
    cands[0].one_off_seconds = one_off;
    cands[0].horizon_tokens = horizon;
    c.choose(cands, 0, 512);
    return cands[0].max_k;
  };
  const int32_t free_k = chosen_k(0, 200);
  EXPECT_GT(free_k, 0);
  // 200 tokens take 13.9 s plainly and 6.1 s drafted: a 3 s catch-up pays for itself, a 10 s
  // one does not.
  EXPECT_EQ(chosen_k(3.0, 200), free_k);
  EXPECT_EQ(chosen_k(10.0, 200), 0);
  // Over few tokens left the same catch-up does not.
  EXPECT_EQ(chosen_k(0.5, 4), 0);
  // max_tokens far away does not make it free: the horizon is capped.
  EXPECT_EQ(chosen_k(12.0, 100000), 0);
}

TEST(Controller, PinnedKAndBudgets) {
  Controller pinned({.adaptive = false, .num_speculative_tokens = 5});
  auto cands = candidates(4, 8);
  cands[1].max_k = 3;  // the proposer found only 3
  pinned.choose(cands, 0, 12);
  EXPECT_EQ(cands[0].max_k, 5);
  EXPECT_EQ(cands[1].max_k, 3);
  EXPECT_EQ(cands[2].max_k, 4);  // the budget of 12 runs out
  EXPECT_EQ(cands[3].max_k, 0);
  Controller adaptive({.adaptive = true, .num_speculative_tokens = 8});
  teach(adaptive, 0.050, 0.0001);
  auto many = candidates(8, 8);
  observe(adaptive, many, 8, 8, 10);
  adaptive.choose(many, 0, 20);
  int64_t total = 0;
  for (const auto& cand : many) total += cand.max_k;
  EXPECT_EQ(total, 20);
  EXPECT_THROW(Controller({.adaptive = true, .num_speculative_tokens = 0}), Error);
  EXPECT_THROW(Controller({.adaptive = true, .num_speculative_tokens = kMaxDraftTokens + 1}), Error);
}

// A sequence the controller leaves without drafts is probed with one draft after 8 idle
// steps, then after 16, 32, ... (at most 128), once its idle steps have put aside (4% of its
// time each) what the probe costs: here a 2-token step costs 40 ms against 25, so 15 steps
// first. An accepted probe lets it draft at once on a step where it pays, and resets the wait.
TEST(Controller, ProbesIdleSequencesWithBackoff) {
  Controller c({.adaptive = true, .num_speculative_tokens = 8});
  teach(c, 0.010, 0.015);  // a 2-token step costs 1.6 plain ones, as on a 2-core CPU
  auto cands = candidates(1, 8);
  observe(c, cands, 4, 0, 10);  // a prose warm-up: nothing accepted
  std::vector<int> probes;
  for (int step = 1; step <= 200; ++step) {
    auto asked = cands;
    c.choose(asked, 0, 512, [](int64_t, int32_t) { return 0.0; });
    auto verified = asked;
    c.choose(verified, 0, 512);  // drafts in hand: the probe is still verified
    EXPECT_EQ(verified[0].max_k, asked[0].max_k) << "step " << step;
    if (asked[0].max_k > 0) {
      EXPECT_EQ(asked[0].max_k, 1) << "step " << step;
      probes.push_back(step);
      c.record_verify(1, 1, 0);  // still prose: rejected
    }
  }
  EXPECT_EQ(probes, (std::vector<int>{15, 31, 63, 127}));
  // Drafting resumes once probes are accepted (each one resets the wait to 8 steps): a new
  // request that copies its prompt after this prose drafts from its first accepted probe; the
  // long-idle one needs a few.
  auto steps_to_draft = [&c](uint64_t id) {
    for (int step = 1; step <= 256; ++step) {
      std::vector<Controller::Candidate> asked{{id, 8}};
      c.choose(asked, 0, 512, [](int64_t, int32_t) { return 0.0; });
      if (asked[0].max_k > 1) return step;
      if (asked[0].max_k == 1) c.record_verify(id, 1, 1);
    }
    return 0;
  };
  const int fresh = steps_to_draft(2);  // probed at step 15, then its drafts lengthen
  EXPECT_GE(fresh, 16);
  EXPECT_LE(fresh, 19);
  const int resumed = steps_to_draft(1);  // its wait had grown to 128; then a few probes 8 apart
  EXPECT_GT(resumed, 0);
  EXPECT_LE(resumed, Controller::kMaxProbeInterval + 4 * Controller::kFirstProbe + 1);
}

// Depth is extrapolated from a request's own deepest positions, not from what other requests
// showed there: a request that copies all the way drafts the whole budget within a few steps
// although others' copies broke at depth 5, and one whose copies break after 4 tokens
// settles just past them.
TEST(Controller, ExtrapolatesDepthFromItsOwnDraftsAndSettlesWhereTheyBreak) {
  Controller c({.adaptive = true, .num_speculative_tokens = 16});
  teach(c, 0.040, 0.004);  // a token more costs a tenth of a decode step
  for (int r = 0; r < 40; ++r) c.record_verify(99, 16, 4);  // others' copies broke at depth 5
  const auto zero_cost = [](int64_t, int32_t) { return 0.0; };
  // Runs one step for seq: asks, verifies what it asked, records `accepted(k)`.
  auto step = [&](uint64_t seq, const auto& accepted) {
    std::vector<Controller::Candidate> asked{{seq, 16}};
    c.choose(asked, 0, 512, zero_cost);
    auto verified = asked;
    c.choose(verified, 0, 512);
    EXPECT_EQ(verified[0].max_k, asked[0].max_k);
    if (asked[0].max_k > 0) c.record_verify(seq, asked[0].max_k, accepted(asked[0].max_k));
    return asked[0].max_k;
  };
  std::vector<int32_t> copy_ks;  // a request that copies all the way
  for (int s = 0; s < 4; ++s) copy_ks.push_back(step(1, [](int32_t k) { return k; }));
  EXPECT_EQ(copy_ks.back(), 16);
  std::vector<int32_t> break_ks;  // a request whose copies break after 4 tokens
  for (int s = 0; s < 30; ++s) break_ks.push_back(step(2, [](int32_t k) { return std::min(k, 4); }));
  for (size_t s = 10; s < break_ks.size(); ++s) {
    EXPECT_GE(break_ks[s], 4) << "step " << s;
    EXPECT_LE(break_ks[s], 6) << "step " << s;
  }
}

// Bets that realise less than their rates promised scale every later gain down, and bets
// that realise what they promised bring it back.
TEST(Controller, CalibratesItsGainsAgainstWhatItsVerificationsRealise) {
  Controller c({.adaptive = true, .num_speculative_tokens = 8});
  teach(c, 0.050, 0.0005);  // flat: drafting pays at any fair acceptance
  EXPECT_DOUBLE_EQ(c.calibration(), 1.0);
  uint64_t id = 1;
  // Requests whose first drafts are all accepted teach a new request to expect as much; each
  // fourth drafts as taught and has everything rejected.
  auto round = [&](int32_t bettor_accepts) {
    for (int i = 0; i < 3; ++i) c.record_verify(id++, 8, 8);
    std::vector<Controller::Candidate> cands{{id, 8}};
    c.choose(cands, 0, 512);
    EXPECT_GT(cands[0].max_k, 0);
    c.record_verify(id, cands[0].max_k, std::min(cands[0].max_k, bettor_accepts));
    c.forget(id++);
  };
  for (int r = 0; r < 10; ++r) round(0);
  const double low = c.calibration();
  EXPECT_LT(low, 0.3);
  for (int r = 0; r < 100; ++r) round(8);
  EXPECT_GT(c.calibration(), 0.9);
}

// The control law in closed loop on simulated requests: a CPU-like step (a 2-token step costs
// 1.3 plain ones, each further token a quarter of one), its time jittering by up to `noise`
// either way, and a proposer whose guess for each next token is right with probability p,
// either independently (a lookup that guesses) or in runs (with probability `persist` a
// token's guess is right exactly when the previous one's was: a copy). The controller sees
// only its verifications and the steps' times, as in the engine.
double cpu_step_seconds(int64_t n) { return n == 1 ? 0.037 : 0.047 + 0.0088 * static_cast<double>(n - 1); }
// A CPU that is compute-bound from a few tokens on (the 1.5B on 2 Zen 3 cores without VNNI:
// 42 ms a decode, 256 ms for 16 tokens, each further token 14 ms): a draft in a batch of 16
// costs nearly what a sequence's own token does.
double compute_bound_step_seconds(int64_t n) { return n == 1 ? 0.042 : 0.030 + 0.0142 * static_cast<double>(n); }
using StepSeconds = double (*)(int64_t);

class GuessStream {  // whether the proposer's guess for each next token is right
 public:
  GuessStream(double p, double persist, uint32_t seed) : p_(p), persist_(persist), rng_(seed), last_(u() < p) {}
  int32_t accepted_of(int32_t k) {  // the leading right guesses among the next k
    int32_t a = 0;
    while (a < k && at(static_cast<size_t>(a))) ++a;
    return a;
  }
  void emit(int32_t tokens) {  // the text moves on, drafted or not
    at(static_cast<size_t>(tokens - 1));
    right_.erase(right_.begin(), right_.begin() + tokens);
  }

 private:
  double u() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  bool at(size_t i) {
    while (right_.size() <= i) {
      last_ = u() < persist_ ? last_ : u() < p_;
      right_.push_back(last_);
    }
    return right_[i];
  }
  double p_, persist_;
  std::mt19937 rng_;
  bool last_;
  std::deque<bool> right_;
};

// Emitted tokens per second over plain decoding's, for `seqs` requests decoding together.
double simulate(double p, double persist, uint32_t seed, int seqs = 1, double noise = 0, int steps = 3000,
                StepSeconds step_seconds = cpu_step_seconds) {
  Controller c({.adaptive = true, .num_speculative_tokens = 16});
  for (const int64_t n : {int64_t{64}, int64_t{seqs}}) c.record_step(n, step_seconds(n));  // the prompts, a first decode
  std::vector<GuessStream> streams;
  for (int i = 0; i < seqs; ++i) streams.emplace_back(p, persist, seed * 1000 + static_cast<uint32_t>(i));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  double seconds = 0, emitted = 0;
  const auto free = [](int64_t, int32_t) { return 0.0; };
  for (int s = 0; s < steps; ++s) {
    std::vector<Controller::Candidate> cands;
    for (int i = 0; i < seqs; ++i) cands.push_back({static_cast<uint64_t>(i + 1), 16});
    c.choose(cands, 0, 512, free);
    c.choose(cands, 0, 512);
    int64_t tokens = seqs;
    for (int i = 0; i < seqs; ++i) {
      const int32_t k = cands[static_cast<size_t>(i)].max_k;
      const int32_t accepted = streams[static_cast<size_t>(i)].accepted_of(k);
      if (k > 0) c.record_verify(cands[static_cast<size_t>(i)].seq_id, k, accepted);
      streams[static_cast<size_t>(i)].emit(accepted + 1);
      tokens += k;
      emitted += 1 + accepted;
    }
    const double t = step_seconds(tokens) * jitter(rng);
    c.record_step(tokens, t);
    seconds += t;
  }
  return emitted / seconds * step_seconds(seqs) / seqs;
}

// Never below 0.97x plain decoding, whatever the acceptance and however it comes, alone or
// in a batch, with steady or jittery step times; clearly faster alone where drafts are mostly
// right.
TEST(Controller, NeverLosesInClosedLoop) {
  for (const StepSeconds cost : {&cpu_step_seconds, &compute_bound_step_seconds}) {
    const bool bound = cost == &compute_bound_step_seconds;
    for (const int seqs : {1, 16})
      for (const double noise : {0.0, 0.2})
        for (const double persist : {0.0, 0.5, 0.9})
          for (const double p : {0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95}) {
            double worst = 1e9;
            for (uint32_t seed = 1; seed <= 2; ++seed)
              worst = std::min(worst, simulate(p, persist, seed, seqs, noise, seqs == 1 ? 3000 : 400, cost));
            EXPECT_GE(worst, 0.97) << (bound ? "compute-bound, " : "") << seqs << " seqs, noise " << noise << ", p " << p
                                   << ", persist " << persist;
            if (seqs == 1 && p >= 0.8 && !bound) {
              EXPECT_GE(worst, 1.25) << "noise " << noise << ", p " << p << ", persist " << persist;
            }
          }
  }
}

// A probe also pays for one more sequence in the proposer's call and for the proposer's
// catch-up on the idle stretch. A proposer that costs 19.5 ms a sequence adds to the 15 ms of
// the step's extra token: 34.5 steps' savings (1 ms each) before every probe. A draft model
// whose catch-up grows 3 ms with every idle step (a CPU's prefill of the tokens it missed)
// outruns the savings: that sequence is not probed again.
TEST(Controller, ProbesPayForTheProposerAndItsCatchUp) {
  auto probe_steps = [](double proposer_per_seq, double catch_up_per_idle_step) {
    Controller c({.adaptive = true, .num_speculative_tokens = 8});
    teach(c, 0.010, 0.015);
    auto cands = candidates(1, 8);
    observe(c, cands, 4, 0, 10);
    std::vector<int> probes;
    int idle = 0;
    const auto proposer = [proposer_per_seq](int64_t seqs, int32_t) { return proposer_per_seq * static_cast<double>(seqs); };
    for (int step = 1; step <= 300; ++step) {
      auto asked = cands;
      asked[0].one_off_seconds = catch_up_per_idle_step * idle;
      c.choose(asked, 0, 512, proposer);
      c.choose(asked, 0, 512);  // drafts in hand
      ++idle;
      if (asked[0].max_k > 0) {
        probes.push_back(step);
        c.record_verify(1, 1, 0);
        idle = 0;
      }
    }
    return probes;
  };
  EXPECT_EQ(probe_steps(0, 0), (std::vector<int>{15, 31, 63, 127, 255}));
  EXPECT_EQ(probe_steps(0.0195, 0), (std::vector<int>{35, 70, 105, 169, 297}));
  EXPECT_TRUE(probe_steps(0, 0.003).empty());
}

// In a compute-bound batch a probe costs about what a sequence's own token does: 16 idle
// sequences whose probes are accepted every other time (each acceptance resets the wait to 8
// steps) keep their probes' time to the share put aside (kProbeShare, 4%: 3.6% here), where
// the backoff alone spent 7%.
TEST(Controller, ProbesInAComputeBoundBatchAreHeldToTheirShare) {
  Controller c({.adaptive = true, .num_speculative_tokens = 8});
  for (const int64_t n : {1, 2, 16, 17, 18, 24, 32}) c.record_step(n, compute_bound_step_seconds(n));
  auto cands = candidates(16, 8);
  observe(c, cands, 4, 0, 10);  // a prose warm-up: no drafting but probes
  double probe_seconds = 0, seconds = 0;
  std::map<uint64_t, int> probes_of;  // every other probe is accepted (each resets the wait)
  for (int step = 1; step <= 400; ++step) {
    auto asked = cands;
    c.choose(asked, 0, 512, [](int64_t, int32_t) { return 0.0; });
    c.choose(asked, 0, 512);
    int64_t probes = 0;
    for (const auto& a : asked) {
      EXPECT_LE(a.max_k, 1);
      if (a.max_k > 0) c.record_verify(a.seq_id, 1, static_cast<int32_t>(++probes_of[a.seq_id] % 2)), ++probes;
    }
    seconds += compute_bound_step_seconds(16 + probes);
    probe_seconds += compute_bound_step_seconds(16 + probes) - compute_bound_step_seconds(16);
  }
  EXPECT_GT(probe_seconds, 0);  // it still probes
  EXPECT_LT(probe_seconds / seconds, 1.1 * Controller::kProbeShare);
}

TEST(Controller, NothingMeasuredMeansNoDrafting) {
  Controller c({.adaptive = true, .num_speculative_tokens = 8});
  auto cands = candidates(2, 8);
  c.choose(cands, 0, 512);
  EXPECT_EQ(cands[0].max_k + cands[1].max_k, 0);
}

TEST(Acceptance, FadingCountsShrunkTowardsThePositionAbove) {
  Acceptance a;
  std::vector<double> r(4);
  a.rates(0.5, r);  // nothing seen: the prior all the way down
  EXPECT_EQ(r, (std::vector<double>{0.5, 0.5, 0.5, 0.5}));
  a.update(4, 2, 1.0);  // positions 0, 1 accepted, 2 rejected, 3 untried
  a.rates(0.5, r);
  EXPECT_DOUBLE_EQ(r[0], (1 + 2 * 0.5) / 3);      // 2/3
  EXPECT_DOUBLE_EQ(r[1], (1 + 2 * r[0]) / 3);     // 7/9: the prior is the position above
  EXPECT_DOUBLE_EQ(r[2], (0 + 2 * r[1]) / 3);
  EXPECT_DOUBLE_EQ(r[3], r[2]);                   // untried: the position above
  for (int i = 0; i < 50; ++i) a.update(1, 0, 0.9);  // then always rejected at position 0
  a.rates(0.5, r);
  EXPECT_LT(r[0], 0.12);  // the old success has faded: about 10 verifications count
}

// Evidence ages with the request's verifications, also at depths they no longer reach: one
// rejection at depth 1, then 1-token drafts only, every one accepted (in a server, an edit
// request drafted so for 170 steps: the old rejection held its depth-1 rate at 0.65, and
// drafting deeper never looked worth it). Its depth-1 rate returns to the position above's.
TEST(Acceptance, AnOldRejectionAtADepthNoLongerDraftedFades) {
  Acceptance a;
  std::vector<double> r(3);
  a.update(3, 1, 0.9);  // accepted at 0, rejected at 1
  a.rates(0.95, r);
  EXPECT_LT(r[1], 0.7);
  for (int i = 0; i < 30; ++i) a.update(1, 1, 0.9);
  a.rates(0.95, r);
  EXPECT_GT(r[0], 0.97);
  EXPECT_GT(r[1], 0.9);  // 0.9^30 of a count left against it
  EXPECT_EQ(r[2], r[1]);
}

}  // namespace
}  // namespace zen::spec
