// The adaptive controller's law on synthetic costs: long drafts where a step is memory-bound
// and acceptance high, none where it is compute-bound and acceptance middling, pinned k when
// not adaptive, budgets respected; the cost model's interpolation and extrapolation.
#include "spec/controller.h"

#include <gtest/gtest.h>

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
  m.record(8, 0.180);                                      // moving average: 0.8 old + 0.2 new
  EXPECT_NEAR(m.predict(8), 0.8 * 0.080 + 0.2 * 0.180, 1e-12);
  m.record(300, 3.0);                                      // buckets past 64 are powers of two
  EXPECT_NEAR(m.predict(512), 3.0 * 512 / 300, 1e-9);
  EXPECT_NE(m.describe().find("4: 40.0 ms"), std::string::npos);
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
// steps, then after 16, 32, ... (at most 128); an accepted probe lets it draft at once on a
// step where it pays, and resets the wait.
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
  EXPECT_EQ(probes, (std::vector<int>{8, 24, 56, 120}));
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
  const int fresh = steps_to_draft(2);  // probed at step 8, then its drafts lengthen
  EXPECT_GE(fresh, 9);
  EXPECT_LE(fresh, 12);
  const int resumed = steps_to_draft(1);  // its wait had grown to 128; then a few probes 8 apart
  EXPECT_GT(resumed, 0);
  EXPECT_LE(resumed, Controller::kMaxProbeInterval + 4 * Controller::kFirstProbe + 1);
}

// A request's allocation can settle at a depth it has only ever seen fully accepted (deeper
// positions carry what other requests taught the average): after a fully accepted
// verification it verifies twice as deep once. A copy that holds all the way is then learnt
// within a few steps; one that keeps breaking at the same depth is retried ever more rarely.
TEST(Controller, DeepensAfterFullyAcceptedDrafts) {
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
  for (int s = 0; s < 8; ++s) copy_ks.push_back(step(1, [](int32_t k) { return k; }));
  EXPECT_LE(copy_ks[0], 5) << "the allocation alone was meant to stop at the others' depth";
  EXPECT_EQ(copy_ks.back(), 16);
  int deeper = 0;  // a request whose copies break after 4 tokens
  for (int s = 0; s < 200; ++s)
    if (step(2, [](int32_t k) { return std::min(k, 4); }) > 5) ++deeper;
  EXPECT_GE(deeper, 1);
  EXPECT_LE(deeper, 8);  // attempts 1, 2, 4, ... 64 verifications apart
  // Off (suffix decoding, whose drafts change with the budget): the allocation alone.
  Controller plain({.adaptive = true, .num_speculative_tokens = 16, .deepen = false});
  teach(plain, 0.040, 0.004);
  for (int r = 0; r < 40; ++r) plain.record_verify(99, 16, 4);
  for (int s = 0; s < 8; ++s) {
    std::vector<Controller::Candidate> asked{{1, 16}};
    plain.choose(asked, 0, 512, zero_cost);
    ASSERT_LE(asked[0].max_k, 5) << "step " << s;
    if (asked[0].max_k > 0) plain.record_verify(1, asked[0].max_k, asked[0].max_k);
  }
}

TEST(Controller, NothingMeasuredMeansNoDrafting) {
  Controller c({.adaptive = true, .num_speculative_tokens = 8});
  auto cands = candidates(2, 8);
  c.choose(cands, 0, 512);
  EXPECT_EQ(cands[0].max_k + cands[1].max_k, 0);
}

TEST(Acceptance, MovingAverageOverTriedPositions) {
  Acceptance a;
  a.fill(0.5);
  a.update(4, 2, 0.5);  // positions 0, 1 accepted, 2 rejected, 3 untried
  EXPECT_FLOAT_EQ(a.rate[0], 0.75f);
  EXPECT_FLOAT_EQ(a.rate[1], 0.75f);
  EXPECT_FLOAT_EQ(a.rate[2], 0.25f);
  EXPECT_EQ(a.tried, 3);
  EXPECT_FLOAT_EQ(a.at(10), 0.25f);  // untried depth: the deepest tried
}

}  // namespace
}  // namespace zen::spec
