// The serving engine end to end on real forwards: continuous batching gives every request
// exactly the output it has alone; preemption under a tiny KV pool loses nothing; a warm
// prefix gives the same logits as a cold one; aborts and impossible requests are clean.
#include "engine/engine.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "base/error.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/engine_test_util.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
using namespace zen::test;

class EngineTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = load_tiny_qwen3();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static EngineOptions options(int64_t kv_blocks = 256) { return pool_of(*model_, kv_blocks, 96); }
  static Model* model_;
};
Model* EngineTiny::model_ = nullptr;

TEST_F(EngineTiny, ConcurrentGreedyEqualsOneByOne) {
  const auto prompts = random_prompts(32, 3, 70, 288, 1);
  const RequestParams params = greedy(12);
  EngineOptions opts = options();
  opts.prefix_cache = false;
  Engine together(*model_, opts);
  const auto batched = run_all(together, prompts, params);
  Engine alone(*model_, opts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto single = run_all(alone, {prompts[i]}, params);
    EXPECT_EQ(batched[i].tokens, single[0].tokens) << "prompt " << i;
    EXPECT_EQ(batched[i].finish_reason, "length");
    EXPECT_EQ(batched[i].completion_tokens, 12);
    EXPECT_EQ(batched[i].prompt_tokens, static_cast<int64_t>(prompts[i].size()));
    EXPECT_EQ(batched[i].updates_after_finish, 0);
  }
  const EngineStats s = together.stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.finished_length, 32);
  EXPECT_EQ(s.generated_tokens, 32 * 12);
}

TEST_F(EngineTiny, PreemptionUnderATinyPoolLosesNothing) {
  const auto prompts = random_prompts(8, 20, 40, 288, 2);
  const RequestParams params = greedy(40);
  Engine roomy(*model_, options());
  const auto want = run_all(roomy, prompts, params);
  // 14 blocks of 16 tokens: enough for any one request (at most 80 tokens = 5 blocks), far
  // too few for all eight at once.
  Engine tight(*model_, options(14));
  const auto got = run_all(tight, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i;
    EXPECT_EQ(got[i].finish_reason, "length");
  }
  const EngineStats s = tight.stats();
  EXPECT_GT(s.preemptions, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST_F(EngineTiny, WarmPrefixGivesTheSameLogitsAsCold) {
  const auto prompts = random_prompts(1, 100, 100, 288, 3);
  RequestParams params = greedy(6);
  params.top_logprobs = 5;
  Engine engine(*model_, options());
  const auto cold = run_all(engine, prompts, params);
  const auto warm = run_all(engine, prompts, params);
  EXPECT_EQ(cold[0].cached_prompt_tokens, 0);
  EXPECT_EQ(warm[0].cached_prompt_tokens, 96);  // 6 full blocks; the last token always runs
  ASSERT_EQ(warm[0].details.size(), cold[0].details.size());
  for (size_t i = 0; i < cold[0].details.size(); ++i) {
    EXPECT_EQ(warm[0].details[i].token, cold[0].details[i].token);
    EXPECT_EQ(warm[0].details[i].logprob, cold[0].details[i].logprob);
    ASSERT_EQ(warm[0].details[i].top.size(), 5u);
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(warm[0].details[i].top[k].token, cold[0].details[i].top[k].token);
      EXPECT_EQ(warm[0].details[i].top[k].logprob, cold[0].details[i].top[k].logprob);
    }
  }
  // A prompt sharing only the first 40 tokens reuses the first 2 blocks.
  auto branch = prompts[0];
  branch.resize(60);
  for (size_t i = 40; i < 60; ++i) branch[i] = static_cast<int32_t>((branch[i] + 1) % 288);
  const auto partial = run_all(engine, {branch}, params);
  EXPECT_EQ(partial[0].cached_prompt_tokens, 32);
  EXPECT_EQ(engine.stats().cached_prompt_tokens, 96 + 32);
}

// Requests sharing a prompt, added at once (the choices of an n > 1 request): one prefills,
// the others wait for its full blocks and take them from the prefix cache; each output is
// the one it has alone.
TEST_F(EngineTiny, SamePromptAtOnceIsPrefilledOnce) {
  const auto prompt = random_prompts(1, 100, 100, 288, 4)[0];
  const auto other = random_prompts(1, 50, 50, 288, 5)[0];
  const std::vector<std::vector<int32_t>> prompts{prompt, prompt, other, prompt};
  Engine together(*model_, options());
  const auto got = run_all(together, prompts, greedy(8));
  Engine alone(*model_, options());
  const auto want = run_all(alone, {prompt}, greedy(8));
  int64_t cached = 0;
  for (size_t i : {0, 1, 3}) {
    EXPECT_EQ(got[i].tokens, want[0].tokens) << i;
    cached += got[i].cached_prompt_tokens;
  }
  EXPECT_EQ(cached, 2 * 96);  // 6 full blocks each for the two that waited
  EXPECT_EQ(got[2].cached_prompt_tokens, 0);
  EXPECT_EQ(together.stats().kv_blocks_used, 0);
}

TEST_F(EngineTiny, LogprobsAreANormalisedDistribution) {
  RequestParams params = greedy(3);
  params.top_logprobs = 20;
  Engine engine(*model_, options());
  const auto out = run_all(engine, random_prompts(1, 10, 10, 288, 4), params);
  for (const GeneratedToken& g : out[0].details) {
    ASSERT_EQ(g.top.size(), 20u);
    EXPECT_EQ(g.top[0].token, g.token);  // greedy picks the most likely
    EXPECT_EQ(g.top[0].logprob, g.logprob);
    EXPECT_LE(g.logprob, 0.0f);
    for (size_t k = 1; k < g.top.size(); ++k) EXPECT_LE(g.top[k].logprob, g.top[k - 1].logprob);
  }
}

TEST_F(EngineTiny, AbortFreesBlocksAndReportsAbort) {
  Engine engine(*model_, options());
  std::string reason;
  int64_t produced = 0;
  uint64_t id = 0;
  const AddResult r = engine.add(random_prompts(1, 30, 30, 288, 5)[0], greedy(100), [&](const RequestUpdate& u) {
    produced += static_cast<int64_t>(u.tokens.size());
    if (u.finished) reason = u.finish_reason;
  });
  ASSERT_EQ(r.status, AddStatus::Ok);
  id = r.id;
  for (int i = 0; i < 4; ++i) engine.step();
  EXPECT_GT(engine.stats().kv_blocks_used, 0);
  engine.abort(id);
  engine.step();
  EXPECT_EQ(reason, "abort");
  EXPECT_LT(produced, 100);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  EXPECT_EQ(engine.stats().finished_abort, 1);
}

// The probe's head-of-line scenario on a small budget: a short request sent while a long
// prompt prefills gets its first token within two steps and finishes before the long one's
// first token; both outputs equal what each gives alone.
TEST_F(EngineTiny, AShortRequestIsNotStuckBehindALongPrefill) {
  const EngineOptions opts = pool_of(*model_, 256, 32);
  const auto long_prompt = random_prompts(1, 200, 200, 288, 11)[0], short_prompt = random_prompts(1, 4, 4, 288, 12)[0];
  Engine alone(*model_, opts);
  const auto want_long = run_all(alone, {long_prompt}, greedy(8))[0], want_short = run_all(alone, {short_prompt}, greedy(4))[0];

  Engine engine(*model_, opts);
  int step = 0, short_added = -1, short_first = -1, short_done = -1, long_first = -1;
  std::vector<int32_t> long_tokens, short_tokens;
  engine.add(long_prompt, greedy(8), [&](const RequestUpdate& u) {
    for (const auto& g : u.tokens) long_tokens.push_back(g.token);
    if (long_first < 0 && !u.tokens.empty()) long_first = step;
  });
  engine.step();
  ++step;
  short_added = step;
  engine.add(short_prompt, greedy(4), [&](const RequestUpdate& u) {
    for (const auto& g : u.tokens) short_tokens.push_back(g.token);
    if (short_first < 0 && !u.tokens.empty()) short_first = step;
    if (u.finished) short_done = step;
  });
  while (engine.step()) ++step;
  EXPECT_LE(short_first - short_added, 1) << "the short request's first token came " << short_first - short_added << " steps late";
  EXPECT_GE(short_done, 0);
  EXPECT_LT(short_done, long_first) << "the short request finished after the long one's first token";
  EXPECT_EQ(long_tokens, want_long.tokens);
  EXPECT_EQ(short_tokens, want_short.tokens);
}

TEST_F(EngineTiny, ImpossibleRequestsAreRejectedWithNumbers) {
  Engine engine(*model_, options());
  const int64_t ctx = engine.context_window();
  EXPECT_EQ(ctx, 256);  // the fixture's max_position_embeddings
  const AddResult too_long = engine.add(std::vector<int32_t>(200, 1), greedy(100), {});
  EXPECT_EQ(too_long.status, AddStatus::TooLong);
  EXPECT_NE(too_long.message.find("200"), std::string::npos) << too_long.message;
  EXPECT_NE(too_long.message.find("256"), std::string::npos) << too_long.message;
  EXPECT_EQ(engine.add({}, greedy(1), {}).status, AddStatus::Invalid);
  EXPECT_EQ(engine.add({5000}, greedy(1), {}).status, AddStatus::Invalid);
  RequestParams bad = greedy(1);
  bad.sampling.top_p = 2.0f;
  EXPECT_EQ(engine.add({1}, bad, {}).status, AddStatus::Invalid);
}

TEST_F(EngineTiny, QueueLimitReportsQueueFull) {
  EngineOptions o = options();
  o.max_waiting = 2;
  Engine engine(*model_, o);
  EXPECT_EQ(engine.add({1, 2}, greedy(1), {}).status, AddStatus::Ok);
  EXPECT_EQ(engine.add({1, 2}, greedy(1), {}).status, AddStatus::Ok);
  EXPECT_EQ(engine.add({1, 2}, greedy(1), {}).status, AddStatus::QueueFull);
  engine.run_until_idle();
}

TEST_F(EngineTiny, BackgroundThreadServesAndStopAbortsTheRest) {
  Engine engine(*model_, options());
  engine.start();
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::string> reasons;
  for (int i = 0; i < 4; ++i)
    engine.add({1, 2, 3, static_cast<int32_t>(i)}, greedy(5), [&](const RequestUpdate& u) {
      if (!u.finished) return;
      std::lock_guard lock(mu);
      reasons.push_back(u.finish_reason);
      ++done;
      cv.notify_all();
    });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done == 4; }));
  }
  for (const auto& r : reasons) EXPECT_EQ(r, "length");
  std::string last;
  engine.add({1, 2, 3}, greedy(200), [&](const RequestUpdate& u) {
    if (u.finished) last = u.finish_reason;
  });
  engine.stop();
  EXPECT_TRUE(last == "abort" || last == "length") << last;
  EXPECT_EQ(engine.add({1}, greedy(1), {}).status, AddStatus::Stopped);
}

TEST_F(EngineTiny, DescribeReportsCapacityAndConcurrency) {
  Engine engine(*model_, options(64));
  EXPECT_EQ(engine.kv_capacity_tokens(), 64 * 16);
  const std::string d = engine.describe();
  EXPECT_NE(d.find("1024 tokens"), std::string::npos) << d;
  EXPECT_NE(d.find("4.00x"), std::string::npos) << d;  // 1024 / 256
}

// Speculative decoding's shape: append a committed token plus wrong drafts, verify all of them
// in one forward with a logits row each, keep the verified prefix, roll the rest back. The
// result must equal plain greedy decoding (rejected drafts leave no trace in the KV cache).
TEST_F(EngineTiny, VerifyAndRollbackEqualsPlainDecoding) {
  const auto prompt = random_prompts(1, 21, 21, 288, 6)[0];
  const int64_t steps = 20;
  Engine engine(*model_, options());
  const auto want = run_all(engine, {prompt}, greedy(steps));

  const ModelConfig& cfg = model_->config();
  KvPool kv(cfg, 16);
  BlockManager blocks(16, kv.block_size(), false);
  Scheduler scheduler(SchedulerConfig{4, 64, 0}, blocks, nullptr);
  ModelRunner runner(*model_, kv, nullptr);
  Sequence seq;
  seq.tokens = prompt;
  seq.prompt_len = static_cast<int64_t>(prompt.size());
  scheduler.add(&seq);
  std::vector<int32_t> got;
  int32_t next = -1;
  while (static_cast<int64_t>(got.size()) < steps) {
    if (next >= 0) {  // the committed token, then two drafts that are (almost surely) wrong
      seq.tokens.push_back(next);
      seq.tokens.push_back(static_cast<int32_t>((next + 7) % 288));
      seq.tokens.push_back(static_cast<int32_t>((next + 11) % 288));
    }
    auto plan = scheduler.schedule();
    ASSERT_EQ(plan.size(), 1u);
    plan[0].all_logits = next >= 0;
    const float* logits = runner.run(plan);
    seq.computed += plan[0].n_tokens;
    const int32_t predicted = argmax(logits, cfg.vocab_size);  // after the committed token
    if (next >= 0) scheduler.rollback(&seq, static_cast<int64_t>(seq.tokens.size()) - 2);
    next = predicted;
    got.push_back(next);
  }
  EXPECT_EQ(got, want[0].tokens);
  scheduler.remove(&seq);
  EXPECT_EQ(blocks.num_free(), 16);
}

// Hybrid models (Gated DeltaNet + gated attention): the same guarantees with recurrent-state
// slots. Prefill steps end on 64-token boundaries, so a prompt's state is identical however
// the scheduler splits it, and the state at the last boundary is kept as a prefix snapshot.
// Fixtures under tests/fixtures; fpquant/qwen3_5_mixed is Zen6's weight mix (FP8 attention and
// Gated DeltaNet projections, NVFP4 MLPs on the default int8-activation path), and
// qwen3_5_tied_q8_0.gguf a Q8_0 GGUF in llama.cpp's qwen35 layout.
class EngineHybrid : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model_ = Model::load((fs::path(ZEN_SOURCE_DIR) / "tests/fixtures" / GetParam()).string(),
                         {.n_threads = 2, .load_tokenizer = false});
    vocab_ = static_cast<int32_t>(model_->config().vocab_size);
  }
  EngineOptions options(int64_t kv_blocks = 256) const { return pool_of(*model_, kv_blocks, 128); }
  std::unique_ptr<Model> model_;
  int32_t vocab_ = 0;
};

TEST_P(EngineHybrid, ConcurrentGreedyEqualsOneByOne) {
  const auto prompts = random_prompts(32, 3, 150, vocab_, 11);
  EngineOptions opts = options();
  opts.prefix_cache = false;
  Engine together(*model_, opts);
  const auto batched = run_all(together, prompts, greedy(10));
  Engine alone(*model_, opts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto single = run_all(alone, {prompts[i]}, greedy(10));
    EXPECT_EQ(batched[i].tokens, single[0].tokens) << "prompt " << i;
  }
  EXPECT_EQ(together.stats().kv_blocks_used, 0);
}

TEST_P(EngineHybrid, WarmPrefixRestoresTheStateSnapshot) {
  const auto prompts = random_prompts(1, 150, 150, vocab_, 12);
  RequestParams params = greedy(5);
  params.top_logprobs = 5;
  Engine engine(*model_, options());
  const auto cold = run_all(engine, prompts, params);
  const auto warm = run_all(engine, prompts, params);
  EXPECT_EQ(cold[0].cached_prompt_tokens, 0);
  EXPECT_EQ(warm[0].cached_prompt_tokens, 128);  // the last 64-token boundary before the end
  ASSERT_EQ(warm[0].details.size(), cold[0].details.size());
  for (size_t i = 0; i < cold[0].details.size(); ++i) {
    EXPECT_EQ(warm[0].details[i].token, cold[0].details[i].token);
    EXPECT_EQ(warm[0].details[i].logprob, cold[0].details[i].logprob);
    for (size_t k = 0; k < 5; ++k) EXPECT_EQ(warm[0].details[i].top[k].logprob, cold[0].details[i].top[k].logprob);
  }
  // Without a snapshot there is no reuse: a prefix shorter than 64 tokens is recomputed.
  auto short_prompt = prompts[0];
  short_prompt.resize(60);
  EXPECT_EQ(run_all(engine, {short_prompt}, params)[0].cached_prompt_tokens, 0);
}

TEST_P(EngineHybrid, SamePromptAtOnceIsPrefilledOnce) {
  const auto prompt = random_prompts(1, 150, 150, vocab_, 13)[0];
  EngineOptions opts = options();
  opts.max_long_partial_prefills = 4;  // long prompts could all prefill at once
  Engine engine(*model_, opts);
  const auto got = run_all(engine, {prompt, prompt, prompt}, greedy(5));
  Engine alone(*model_, options());
  const auto want = run_all(alone, {prompt}, greedy(5));
  for (const auto& g : got) EXPECT_EQ(g.tokens, want[0].tokens);
  EXPECT_EQ(got[0].cached_prompt_tokens + got[1].cached_prompt_tokens + got[2].cached_prompt_tokens, 2 * 128);
}

// Snapshot memory is bounded: a budget of one state keeps one snapshot (the newest, at the last
// 64-token boundary, which is what a repeated prompt needs); none keeps none, and a repeated
// prompt is then recomputed, with the same tokens.
TEST_P(EngineHybrid, SnapshotMemoryBoundsTheSnapshots) {
  const auto prompts = random_prompts(1, 150, 150, vocab_, 14);
  const int64_t slot_bytes = recurrent_state_floats(model_->config()) * static_cast<int64_t>(sizeof(float));
  EngineOptions one = options();
  one.state_snapshot_memory_bytes = slot_bytes + slot_bytes / 2;
  Engine engine(*model_, one);
  EXPECT_NE(engine.describe().find("(1 for prefix snapshots"), std::string::npos) << engine.describe();
  const auto cold = run_all(engine, prompts, greedy(5));
  const auto warm = run_all(engine, prompts, greedy(5));
  EXPECT_EQ(warm[0].cached_prompt_tokens, 128);
  EXPECT_EQ(warm[0].tokens, cold[0].tokens);

  EngineOptions none = options();
  none.state_snapshot_slots = 0;
  Engine without(*model_, none);
  EXPECT_NE(without.describe().find("(0 for prefix snapshots"), std::string::npos) << without.describe();
  run_all(without, prompts, greedy(5));
  const auto again = run_all(without, prompts, greedy(5));
  EXPECT_EQ(again[0].cached_prompt_tokens, 0);
  EXPECT_EQ(again[0].tokens, cold[0].tokens);
}

TEST_P(EngineHybrid, PreemptionUnderATinyPoolCompletesEveryRequest) {
  const auto prompts = random_prompts(6, 40, 70, vocab_, 13);
  Engine roomy(*model_, options());
  const auto want = run_all(roomy, prompts, greedy(30));
  Engine tight(*model_, options(12));
  const auto got = run_all(tight, prompts, greedy(30));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].finish_reason, "length");
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i;
  }
  EXPECT_GT(tight.stats().preemptions, 0);
  EXPECT_EQ(tight.stats().kv_blocks_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineHybrid,
                         ::testing::Values("models/qwen3_5_text_f32", "models/qwen3_next_f32", "fpquant/qwen3_5_mixed",
                                           "models/qwen3_5_tied_q8_0.gguf", "models/qwen3_5_moe_tied_f32.gguf",
                                           "models/qwen3_next_tied_f32.gguf"),
                         [](const auto& info) {
                           std::string name = fs::path(info.param).filename().string();
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

// The default model (Qwen2.5-Coder-0.5B Q4_K_M): 32 different prompts at once give each the
// greedy text it gets alone, with batches mixing prefill chunks and decodes.
TEST(EngineDefaultModel, ThirtyTwoConcurrentPromptsEqualOneByOne) {
  const fs::path path = fs::path(ZEN_SOURCE_DIR) / "models/default/model.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "default model absent: run ./setup.sh";
  auto model = Model::load(path.string(), {.n_threads = 2});
  const char* topics[] = {"a linked list", "binary search", "a hash map", "quicksort", "a trie", "Dijkstra",
                          "a ring buffer", "merge sort"};
  const char* languages[] = {"Python", "C++", "Rust", "Go"};
  std::vector<std::vector<int32_t>> prompts;
  for (const char* topic : topics)
    for (const char* lang : languages)
      prompts.push_back(model->tokenizer()->encode(std::string("// ") + lang + ": implement " + topic + "\n"));
  ASSERT_EQ(prompts.size(), 32u);
  RequestParams params;
  params.max_tokens = 12;
  EngineOptions opts;
  opts.kv_memory_bytes = int64_t{256} << 20;
  opts.max_num_batched_tokens = 64;  // forces prefill chunks to share steps with decodes
  Engine together(*model, opts);
  const auto batched = run_all(together, prompts, params);
  Engine alone(*model, opts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto single = run_all(alone, {prompts[i]}, params);
    EXPECT_EQ(batched[i].tokens, single[0].tokens) << "prompt " << i;
    EXPECT_EQ(batched[i].finish_reason, single[0].finish_reason);
  }
  EXPECT_EQ(together.stats().kv_blocks_used, 0);
}

}  // namespace
}  // namespace zen
