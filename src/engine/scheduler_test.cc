// The scheduler's plans without a model: the engine's part (advancing `computed`, appending a
// token after a prefill completes) is simulated, so each plan can be checked token by token.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "base/error.h"

namespace zen {
namespace {

struct Sim {
  BlockManager blocks{4096, 16, false};
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  explicit Sim(const SchedulerConfig& c) : sched(c, blocks, nullptr) {}

  Sequence* add(int64_t prompt_len) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size() + 1;
    s->tokens.assign(static_cast<size_t>(prompt_len), 7);
    s->prompt_len = prompt_len;
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  // One step: plans, then does what the engine does after the forward. Tokens per sequence id.
  std::map<uint64_t, int64_t> step() {
    std::map<uint64_t, int64_t> planned;
    for (const ScheduledSeq& s : sched.schedule()) {
      planned[s.seq->id] = s.n_tokens;
      s.seq->computed += s.n_tokens;
      if (s.seq->uncomputed() == 0) s.seq->tokens.push_back(7);  // a sampled token
    }
    return planned;
  }
};

SchedulerConfig config(int64_t budget) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  return c;
}

TEST(Scheduler, ALongPrefillAloneTakesTheWholeBudget) {
  Sim sim(config(64));
  const Sequence* seq = sim.add(1000);
  EXPECT_EQ(sim.step().at(seq->id), 64);
  EXPECT_EQ(sim.step().at(seq->id), 64);
}

TEST(Scheduler, AShortRequestStartsTheStepAfterItArrivesBehindALongPrefill) {
  Sim sim(config(64));  // long threshold: 64 / 4 = 16
  const Sequence* long_seq = sim.add(1000);
  EXPECT_EQ(sim.step().at(long_seq->id), 64);
  const Sequence* short_seq = sim.add(10);
  auto plan = sim.step();
  EXPECT_EQ(plan.at(long_seq->id), 16) << "under contention a long prefill gets its threshold";
  EXPECT_EQ(plan.at(short_seq->id), 10) << "the short prompt is admitted in the same step, whole";
  plan = sim.step();
  EXPECT_EQ(plan.at(short_seq->id), 1) << "decodes run first";
  EXPECT_EQ(plan.at(long_seq->id), 16);
}

TEST(Scheduler, OnlyOneLongPromptPrefillsAtATimeAndShortOnesPassTheQueue) {
  Sim sim(config(64));
  const Sequence* a = sim.add(500);
  const Sequence* b = sim.add(500);
  const Sequence* c = sim.add(8);
  auto plan = sim.step();
  EXPECT_EQ(plan.count(a->id), 1u);
  EXPECT_EQ(plan.count(b->id), 0u) << "max_long_partial_prefills = 1";
  EXPECT_EQ(plan.at(c->id), 8) << "the short prompt passes the waiting long one";
  // b starts once a's prefill is no longer long (at most the threshold, 16, left).
  while (a->uncomputed() > 16) EXPECT_EQ(sim.step().count(b->id), 0u) << "a has " << a->uncomputed() << " left";
  EXPECT_GT(sim.step().count(b->id), 0u);
}

TEST(Scheduler, PartialPrefillsAreBounded) {
  SchedulerConfig c = config(256);
  c.max_num_partial_prefills = 2;
  Sim sim(c);
  for (int i = 0; i < 4; ++i) sim.add(40);
  EXPECT_EQ(sim.step().size(), 2u);
}

TEST(Scheduler, PrefillChunksShrinkAsTheirContextGrows) {
  SchedulerConfig c = config(256);
  c.attention_span = 512;
  Sim sim(c);
  Sequence* seq = sim.add(4000);
  int64_t last = c.max_num_batched_tokens;
  while (seq->uncomputed() > 1) {
    const int64_t at = seq->computed;
    const int64_t n = sim.step().at(seq->id);
    EXPECT_LE(n, last) << "at " << at;
    const double cost = static_cast<double>(n) * (1.0 + static_cast<double>(at + n) / 512.0);
    if (n > 16) {
      EXPECT_LE(cost, 256.0) << "chunk of " << n << " at " << at;
    }
    EXPECT_GE(n, std::min<int64_t>(16, seq->prompt_len - at)) << "a prefill always moves";
    last = n;
  }
  EXPECT_LT(last, 64) << "deep in the context the chunk is a fraction of the budget";
}

TEST(Scheduler, HybridChunksStayAlignedUnderTheCaps) {
  SchedulerConfig c = config(512);
  c.state_align = 64;
  c.long_prefill_token_threshold = 100;  // rounded up to 128
  c.attention_span = 2000;
  Sim sim(c);
  Sequence* long_seq = sim.add(3000);
  sim.add(20);
  EXPECT_EQ(sim.sched.long_prefill_threshold(), 128);
  while (long_seq->uncomputed() > 1) {
    const int64_t at = long_seq->computed;
    const auto plan = sim.step();
    if (plan.count(long_seq->id) == 0) continue;
    const int64_t end = at + plan.at(long_seq->id);
    EXPECT_TRUE(end % 64 == 0 || end == long_seq->prompt_len) << "chunk ends at " << end;
  }
}

TEST(Scheduler, BadLimitsAreRefusedByFlagName) {
  auto refused = [](SchedulerConfig c, const std::string& flag) {
    BlockManager blocks(16, 16, false);
    try {
      Scheduler s(c, blocks, nullptr);
      ADD_FAILURE() << flag << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  SchedulerConfig c = config(64);
  c.long_prefill_token_threshold = -1;
  refused(c, "--long-prefill-token-threshold");
  c = config(64);
  c.max_num_partial_prefills = 0;
  refused(c, "--max-num-partial-prefills");
  c = config(64);
  c.max_long_partial_prefills = 5;
  refused(c, "--max-long-partial-prefills");
}

}  // namespace
}  // namespace zen
