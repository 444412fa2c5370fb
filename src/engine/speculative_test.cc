// Speculative decoding through the engine: greedy output is bit-identical to plain decoding
// (tokens, logprobs, finish reasons) for every proposer, alone and at concurrency, with stop
// tokens and max_tokens cutting drafts, under preemption and aborts; sampled output has the
// same distribution (two-sample chi-square per position).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "spec/draft_model.h"
#include "spec/ngram.h"
#include "spec/proposer.h"
#include "spec/suffix.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
using namespace zen::test;

// Drafts the reference continuation of each prompt (recorded from a plain run), each token
// replaced by a wrong one with probability `error_rate`, so every acceptance length occurs.
// With `with_q` it drafts from a random distribution q around the reference token instead
// and reports q, exercising the verifier's p/q path.
class OracleProposer : public spec::Proposer {
 public:
  OracleProposer(std::map<std::vector<int32_t>, std::vector<int32_t>> reference, int32_t vocab, double error_rate,
                 bool with_q = false)
      : reference_(std::move(reference)), vocab_(vocab), error_rate_(error_rate), with_q_(with_q) {}
  std::string_view name() const override { return "oracle"; }
  void propose(std::span<spec::DraftSlot> slots) override {
    for (spec::DraftSlot& s : slots) {
      const std::vector<int32_t> prompt(s.tokens.begin(), s.tokens.begin() + s.prompt_len);
      const auto it = reference_.find(prompt);
      const std::vector<int32_t>* want = it == reference_.end() ? nullptr : &it->second;
      const auto have = static_cast<size_t>(static_cast<int64_t>(s.tokens.size()) - s.prompt_len);
      for (int32_t j = 0; j < s.max_tokens; ++j) {
        const size_t at = have + static_cast<size_t>(j);
        int32_t t = want && at < want->size() ? (*want)[at] : static_cast<int32_t>(rng_() % static_cast<uint32_t>(vocab_));
        if (std::uniform_real_distribution<double>(0, 1)(rng_) < error_rate_)
          t = static_cast<int32_t>((t + 1 + rng_() % 7) % static_cast<uint32_t>(vocab_));
        if (with_q_) t = draw_q(t, s);
        s.draft.push_back(t);
      }
    }
  }
  void finish(uint64_t, std::span<const int32_t>, int64_t) override { ++finished_; }
  int finished_ = 0;

 private:
  // q: half the mass on `center`, the rest spread over a few random tokens; draws from it.
  int32_t draw_q(int32_t center, spec::DraftSlot& s) {
    std::vector<float> q(static_cast<size_t>(vocab_), 0.0f);
    q[static_cast<size_t>(center)] += 0.5f;
    for (int i = 0; i < 5; ++i) q[rng_() % static_cast<uint32_t>(vocab_)] += 0.1f;
    std::discrete_distribution<int32_t> d(q.begin(), q.end());
    s.q.insert(s.q.end(), q.begin(), q.end());
    return d(rng_);
  }
  std::map<std::vector<int32_t>, std::vector<int32_t>> reference_;
  int32_t vocab_;
  double error_rate_;
  bool with_q_;
  std::mt19937 rng_{12345};
};

class EngineSpec : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = load_tiny_qwen3();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static int32_t vocab() { return static_cast<int32_t>(model_->config().vocab_size); }
  static std::map<std::vector<int32_t>, std::vector<int32_t>> reference(const std::vector<std::vector<int32_t>>& prompts,
                                                                         const std::vector<Outcome>& outcomes) {
    std::map<std::vector<int32_t>, std::vector<int32_t>> ref;
    for (size_t i = 0; i < prompts.size(); ++i) ref[prompts[i]] = outcomes[i].tokens;
    return ref;
  }
  // Plain decoding, one request at a time.
  static std::vector<Outcome> plain(const std::vector<std::vector<int32_t>>& prompts, const RequestParams& params) {
    std::vector<Outcome> out;
    for (const auto& p : prompts) {
      Engine engine(*model_, pool_of(*model_, 256, 96));
      out.push_back(run_all(engine, {p}, params)[0]);
    }
    return out;
  }
  static void expect_same(const std::vector<Outcome>& got, const std::vector<Outcome>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
      EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << "request " << i;
      EXPECT_EQ(got[i].completion_tokens, want[i].completion_tokens) << "request " << i;
      EXPECT_EQ(got[i].updates_after_finish, 0);
      ASSERT_EQ(got[i].details.size(), want[i].details.size());
      for (size_t t = 0; t < got[i].details.size(); ++t) {
        EXPECT_EQ(got[i].details[t].logprob, want[i].details[t].logprob) << "request " << i << " token " << t;
        ASSERT_EQ(got[i].details[t].top.size(), want[i].details[t].top.size());
        for (size_t j = 0; j < got[i].details[t].top.size(); ++j) {
          EXPECT_EQ(got[i].details[t].top[j].token, want[i].details[t].top[j].token);
          EXPECT_EQ(got[i].details[t].top[j].logprob, want[i].details[t].top[j].logprob);
        }
      }
    }
  }
  static Model* model_;
};
Model* EngineSpec::model_ = nullptr;

spec::ControllerOptions fixed_k(int32_t k) { return {.adaptive = false, .num_speculative_tokens = k}; }

TEST_F(EngineSpec, GreedyOracleDraftsEqualPlainDecodingAloneAndAtConcurrency) {
  const auto prompts = random_prompts(16, 5, 40, vocab(), 21);
  RequestParams params = greedy(29);  // not a multiple of k: the last drafts are cut by max_tokens
  params.top_logprobs = 3;
  const auto want = plain(prompts, params);
  for (const int32_t k : {1, 4, 7}) {
    for (const bool together : {true, false}) {
      std::vector<Outcome> got;
      Engine engine(*model_, pool_of(*model_, 256, 96));
      engine.use_proposer(std::make_unique<OracleProposer>(reference(prompts, want), vocab(), 0.2), fixed_k(k));
      if (together) {
        got = run_all(engine, prompts, params);
      } else {
        for (const auto& p : prompts) got.push_back(run_all(engine, {p}, params)[0]);
      }
      SCOPED_TRACE("k " + std::to_string(k) + (together ? " together" : " one by one"));
      expect_same(got, want);
      const EngineStats s = engine.stats();
      EXPECT_GT(s.spec_drafts, 0);
      EXPECT_GT(s.spec_accepted_tokens, 0);
      EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);  // some drafts were wrong
      EXPECT_EQ(s.kv_blocks_used, 0);
      // Fewer forwards than tokens: speculation did work.
      EXPECT_LT(s.steps, s.generated_tokens);
    }
  }
}

// A model with sliding-window layers, whose K/V the engine keeps in a pool bounded by the
// window: verification writes drafts' rows there too, and rejected ones are rewritten.
TEST(EngineSpecSliding, OracleDraftsOnSlidingLayersEqualPlainDecoding) {
  auto model = Model::load(std::string(ZEN_SOURCE_DIR) + "/tests/fixtures/models/qwen3_sliding",
                           {.n_threads = 2, .load_tokenizer = false});
  const auto vocab = static_cast<int32_t>(model->config().vocab_size);
  const auto prompts = random_prompts(16, 10, 60, vocab, 22);
  RequestParams params = greedy(37);
  params.top_logprobs = 2;
  EngineOptions o;
  o.kv_memory_bytes = int64_t{8} << 20;
  o.max_num_batched_tokens = 64;
  std::vector<Outcome> want;
  for (const auto& p : prompts) {
    Engine alone(*model, o);
    want.push_back(run_all(alone, {p}, params)[0]);
  }
  std::map<std::vector<int32_t>, std::vector<int32_t>> ref;
  for (size_t i = 0; i < prompts.size(); ++i) ref[prompts[i]] = want[i].tokens;
  Engine engine(*model, o);
  ASSERT_NE(engine.describe().find("Sliding-window layers"), std::string::npos);
  engine.use_proposer(std::make_unique<OracleProposer>(ref, vocab, 0.25), fixed_k(6));
  const auto got = run_all(engine, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    ASSERT_EQ(got[i].details.size(), want[i].details.size());
    for (size_t t = 0; t < got[i].details.size(); ++t) EXPECT_EQ(got[i].details[t].logprob, want[i].details[t].logprob);
  }
  const EngineStats s = engine.stats();
  EXPECT_GT(s.spec_accepted_tokens, 0);
  EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST_F(EngineSpec, StopTokensInsideAcceptedDraftsEndTheRequestThere) {
  const auto prompts = random_prompts(8, 5, 30, vocab(), 5);
  const auto free_run = plain(prompts, greedy(24));
  // Each request stops at a token its free run produces at position 6 (plain decoding stops at
  // its first occurrence); drafts run past it.
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams params = greedy(24);
    params.ignore_eos = false;
    params.stop_token_ids = {free_run[i].tokens[6]};
    const auto want = plain({prompts[i]}, params);
    Engine engine(*model_, pool_of(*model_, 256, 96));
    engine.use_proposer(std::make_unique<OracleProposer>(reference({prompts[i]}, free_run), vocab(), 0.0), fixed_k(8));
    const auto got = run_all(engine, {prompts[i]}, params);
    expect_same(got, want);
    EXPECT_EQ(got[0].finish_reason, "stop");
    EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  }
}

TEST_F(EngineSpec, NgramAndSuffixProposersEqualPlainDecoding) {
  // Repetitive prompts, so the lookups find matches.
  auto prompts = random_prompts(12, 4, 9, vocab(), 8);
  for (auto& p : prompts) {
    const auto unit = p;
    for (int r = 0; r < 6; ++r) p.insert(p.end(), unit.begin(), unit.end());
  }
  const auto want = plain(prompts, greedy(40));
  std::vector<std::unique_ptr<spec::Proposer>> proposers;
  proposers.push_back(std::make_unique<spec::NgramProposer>(spec::NgramOptions{1, 4}));
  proposers.push_back(std::make_unique<spec::SuffixProposer>(spec::SuffixOptions{}));
  for (auto& proposer : proposers) {
    const std::string name(proposer->name());
    Engine engine(*model_, pool_of(*model_, 256, 96));
    engine.use_proposer(std::move(proposer), fixed_k(6));
    expect_same(run_all(engine, prompts, greedy(40)), want);
    EXPECT_GT(engine.stats().spec_draft_tokens, 0) << name;
    EXPECT_EQ(engine.stats().kv_blocks_used, 0) << name;
  }
}

TEST_F(EngineSpec, PreemptionUnderATinyPoolLosesNothing) {
  const auto prompts = random_prompts(16, 20, 60, vocab(), 31);
  const auto want = plain(prompts, greedy(40));
  Engine engine(*model_, pool_of(*model_, 14, 96));  // 14 blocks of 16 for 16 requests of ~90 tokens
  engine.use_proposer(std::make_unique<OracleProposer>(reference(prompts, want), vocab(), 0.3), fixed_k(5));
  expect_same(run_all(engine, prompts, greedy(40)), want);
  EXPECT_GT(engine.stats().preemptions, 0);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST_F(EngineSpec, AbortInTheMiddleOfSpeculationLeaksNothing) {
  const auto prompts = random_prompts(8, 10, 30, vocab(), 41);
  const auto want = plain(prompts, greedy(64));
  Engine engine(*model_, pool_of(*model_, 256, 96));
  auto oracle = std::make_unique<OracleProposer>(reference(prompts, want), vocab(), 0.1);
  OracleProposer* seen = oracle.get();
  engine.use_proposer(std::move(oracle), fixed_k(6));
  std::vector<uint64_t> ids;
  std::vector<std::string> reasons(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    ids.push_back(engine.add(prompts[i], greedy(64), [&reasons, i](const RequestUpdate& u) {
      if (u.finished) reasons[i] = u.finish_reason;
    }).id);
  for (int s = 0; s < 6; ++s) engine.step();
  EXPECT_GT(engine.stats().spec_drafts, 0);
  for (size_t i = 0; i < ids.size(); i += 2) engine.abort(ids[i]);
  engine.run_until_idle();
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(reasons[i], i % 2 == 0 ? "abort" : "length") << i;
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  EXPECT_EQ(seen->finished_, static_cast<int>(prompts.size()));  // every request's state dropped
}

TEST_F(EngineSpec, SeededSamplingWithPointMassDraftsEqualsPlainDecoding) {
  // Point-mass drafts are verified by drawing from p as plain decoding does, one draw per
  // emitted token, so a seeded request's output is the same with or without them.
  const auto prompts = random_prompts(12, 5, 30, vocab(), 77);
  RequestParams params = greedy(30);
  params.sampling.temperature = 0.9f;
  params.sampling.top_p = 0.95f;
  params.sampling.repetition_penalty = 1.1f;
  params.sampling.has_seed = true;
  params.sampling.seed = 4242;
  params.top_logprobs = 1;
  const auto want = plain(prompts, params);
  Engine engine(*model_, pool_of(*model_, 256, 96));
  engine.use_proposer(std::make_unique<OracleProposer>(reference(prompts, plain(prompts, greedy(30))), vocab(), 0.2),
                      fixed_k(4));
  expect_same(run_all(engine, prompts, params), want);
  EXPECT_GT(engine.stats().spec_accepted_tokens, 0);
}

TEST_F(EngineSpec, SampledOutputHasTheDistributionOfPlainDecoding) {
  const auto prompt = random_prompts(1, 12, 12, vocab(), 3)[0];
  RequestParams params;
  params.max_tokens = 4;
  params.ignore_eos = true;
  params.sampling.temperature = 0.6f;
  params.sampling.top_k = 40;
  params.sampling.has_seed = true;
  const auto greedy_run = plain({prompt}, greedy(8));
  const int runs = 3000;
  auto sample_all = [&](std::unique_ptr<spec::Proposer> proposer) {
    Engine engine(*model_, pool_of(*model_, 512, 256));
    if (proposer) engine.use_proposer(std::move(proposer), fixed_k(3));
    std::vector<std::map<int32_t, int>> counts(4);
    // Waves of 16: their prompts prefill in one step, then they decode (drafts only take what
    // waiting prompts leave of the budget, so a long queue would keep them from drafting).
    for (int base = 0; base < runs; base += 16) {
      std::vector<Outcome> outs(16);
      for (int i = 0; i < 16 && base + i < runs; ++i) {
        RequestParams p = params;
        p.sampling.seed = uint64_t{1000003} * static_cast<uint64_t>(base + i) + (proposer ? 7u : 0u);
        Outcome* o = &outs[static_cast<size_t>(i)];
        engine.add(prompt, p, [o](const RequestUpdate& u) {
          for (const auto& g : u.tokens) o->tokens.push_back(g.token);
        });
      }
      engine.run_until_idle();
      for (const Outcome& o : outs)
        for (size_t pos = 0; pos < o.tokens.size() && pos < 4; ++pos) counts[pos][o.tokens[pos]]++;
    }
    return std::make_pair(counts, engine.stats());
  };
  const auto [plain_counts, plain_stats] = sample_all(nullptr);
  // A point-mass proposer (the greedy continuation, often right), one with a synthetic q, and
  // a real draft model (another fixture of the same vocabulary) drafting from its own q.
  const std::map<std::vector<int32_t>, std::vector<int32_t>> ref{{prompt, greedy_run[0].tokens}};
  for (const int kind : {0, 1, 2}) {
    std::unique_ptr<spec::Proposer> proposer;
    if (kind < 2) {
      proposer = std::make_unique<OracleProposer>(ref, vocab(), 0.1, kind == 1);
    } else {
      auto draft = std::make_unique<spec::DraftModelProposer>(
          *model_, Model::load((fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models/qwen3_bf16_tied").string(),
                               {.n_threads = 2, .load_tokenizer = false}),
          spec::DraftModelOptions{});
      draft->reserve_kv(512 * 16);
      proposer = std::move(draft);
    }
    const auto [spec_counts, spec_stats] = sample_all(std::move(proposer));
    const char* name = kind == 0 ? " (point mass)" : kind == 1 ? " (synthetic q)" : " (draft model q)";
    EXPECT_GT(spec_stats.spec_accepted_tokens, runs / (kind == 2 ? 100 : 8)) << "too few drafts accepted to test anything" << name;
    EXPECT_LT(spec_stats.spec_accepted_tokens, spec_stats.spec_draft_tokens) << name;
    for (size_t pos = 0; pos < 4; ++pos) {
      EXPECT_EQ(plain_counts[pos].size() > 5, true) << "position " << pos << " is nearly deterministic";
      EXPECT_LT(chi_square_ratio(plain_counts[pos], spec_counts[pos]), 1.0) << "position " << pos << name;
    }
  }
}

// Real models: the default model (Qwen2.5-Coder-0.5B) with lookups, and Qwen2.5-Coder-1.5B
// drafted by it, alone and 16 at once, with logprobs and stop tokens: identical to plain
// decoding.
TEST(EngineSpecRealModels, GreedySpeculationEqualsPlainDecoding) {
  const fs::path small = fs::path(ZEN_SOURCE_DIR) / "models/default/model.gguf";
  const fs::path large = fs::path(ZEN_SOURCE_DIR) / "models/coder-1.5b/model.gguf";
  if (!fs::exists(small)) GTEST_SKIP() << "default model absent: run ./setup.sh";
  struct Case {
    fs::path target;
    spec::SpeculativeConfig config;
    int64_t max_tokens;
  };
  std::vector<Case> cases;
  spec::SpeculativeConfig ngram, suffix, draft;
  ngram.method = "ngram";
  ngram.num_speculative_tokens = 8;
  suffix.method = "suffix";
  draft.method = "draft_model";
  draft.model = small.string();
  draft.num_speculative_tokens = 4;
  cases.push_back({small, ngram, 48});
  cases.push_back({small, suffix, 48});
  if (fs::exists(large)) cases.push_back({large, draft, 24});
  for (const Case& c : cases) {
    auto model = Model::load(c.target.string(), {.n_threads = 2});
    const Tokenizer& tok = *model->tokenizer();
    std::vector<std::vector<int32_t>> prompts;
    const char* bodies[] = {"def add(a, b):\n    return a + b\n\n# the same function again:\ndef add(",
                            "for i in range(10):\n    print(i)\nfor i in range(10):\n", "The capital of France is",
                            "x = [1, 2, 3, 4, 5, 6, 7, 8]\ny = [1, 2, 3,"};
    for (int i = 0; i < 16; ++i) prompts.push_back(tok.encode(std::string("// ") + std::to_string(i) + "\n" + bodies[i % 4]));
    RequestParams params = greedy(c.max_tokens);
    params.top_logprobs = 1;
    params.ignore_eos = false;
    params.stop_token_ids = {tok.encode("\n\n\n")[0]};
    EngineOptions o;
    o.kv_memory_bytes = int64_t{256} << 20;
    o.context_window = 512;
    Engine plain_engine(*model, o);
    std::vector<Outcome> want;
    for (const auto& p : prompts) want.push_back(run_all(plain_engine, {p}, params)[0]);
    o.speculative = c.config;
    SCOPED_TRACE(c.config.describe());
    Engine alone(*model, o);
    std::vector<Outcome> one_by_one;
    for (const auto& p : prompts) one_by_one.push_back(run_all(alone, {p}, params)[0]);
    Engine together(*model, o);
    const auto batched = run_all(together, prompts, params);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(one_by_one[i].tokens, want[i].tokens) << "prompt " << i << " alone";
      EXPECT_EQ(batched[i].tokens, want[i].tokens) << "prompt " << i << " of 16";
      EXPECT_EQ(batched[i].finish_reason, want[i].finish_reason);
      for (size_t t = 0; t < want[i].details.size() && t < batched[i].details.size(); ++t)
        EXPECT_EQ(batched[i].details[t].logprob, want[i].details[t].logprob) << "prompt " << i << " token " << t;
    }
    EXPECT_GT(together.stats().spec_accepted_tokens, 0);
    EXPECT_EQ(together.stats().kv_blocks_used, 0);
  }
}

// Hybrid models: verification restores the recurrent state after the last accepted token from
// the per-token history (computed in the recurrent form decoding uses), so output is again
// bit-identical, with prefix snapshots and preemption in play.
class EngineSpecHybrid : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineSpecHybrid, GreedyDraftsEqualPlainDecoding) {
  auto model = Model::load((fs::path(ZEN_SOURCE_DIR) / "tests/fixtures" / GetParam()).string(),
                           {.n_threads = 2, .load_tokenizer = false});
  const auto vocab = static_cast<int32_t>(model->config().vocab_size);
  const auto prompts = random_prompts(12, 3, 140, vocab, 17);
  RequestParams params = greedy(70);  // crosses the 64-token snapshot boundary while verifying
  params.top_logprobs = 2;
  std::vector<Outcome> want;
  for (const auto& p : prompts) {
    Engine alone(*model, pool_of(*model, 256, 128));
    want.push_back(run_all(alone, {p}, params)[0]);
  }
  std::map<std::vector<int32_t>, std::vector<int32_t>> ref;
  for (size_t i = 0; i < prompts.size(); ++i) ref[prompts[i]] = want[i].tokens;
  for (const int64_t blocks : {int64_t{256}, int64_t{20}}) {  // 20: preemption
    Engine engine(*model, pool_of(*model, blocks, 128));
    engine.use_proposer(std::make_unique<OracleProposer>(ref, vocab, 0.25), fixed_k(5));
    const auto got = run_all(engine, prompts, params);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i << ", " << blocks << " blocks";
      ASSERT_EQ(got[i].details.size(), want[i].details.size());
      for (size_t t = 0; t < got[i].details.size(); ++t)
        ASSERT_EQ(got[i].details[t].logprob, want[i].details[t].logprob) << "prompt " << i << " (" << prompts[i].size() << " tokens) token " << t;
    }
    const EngineStats s = engine.stats();
    EXPECT_GT(s.spec_accepted_tokens, 0);
    EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);
    EXPECT_EQ(s.kv_blocks_used, 0);
    if (blocks == 20) {
      EXPECT_GT(s.preemptions, 0);
    } else {
      // The prompt and output of a request as the next turn's prompt: the state snapshots taken
      // while verifying (boundaries inside accepted runs included) serve it, exactly.
      std::vector<int32_t> turn = prompts[3];
      turn.insert(turn.end(), got[3].tokens.begin(), got[3].tokens.end());
      const auto warm = run_all(engine, {turn}, greedy(6))[0];
      EngineOptions cold_options = pool_of(*model, 256, 128);
      cold_options.prefix_cache = false;
      Engine cold_engine(*model, cold_options);
      const auto cold = run_all(cold_engine, {turn}, greedy(6))[0];
      EXPECT_EQ(warm.tokens, cold.tokens);
      EXPECT_EQ(warm.cached_prompt_tokens, (static_cast<int64_t>(turn.size()) - 1) / 64 * 64)
          << "the snapshot at the last boundary, taken while verifying, was not reused";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineSpecHybrid,
                         ::testing::Values("models/qwen3_5_text_f32", "models/qwen3_next_f32", "fpquant/qwen3_5_mixed",
                                           "models/qwen3_5_tied_q8_0.gguf"),
                         [](const auto& info) {
                           std::string name = fs::path(info.param).filename().string();
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

}  // namespace
}  // namespace zen
