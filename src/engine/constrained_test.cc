// Constrained decoding through the engine: every output follows its grammar, ends only where
// the grammar may end, and speculation changes nothing: greedy output with each proposer
// (drafts checked against the grammar, each verified position under its own mask) equals
// constrained plain decoding, and seeded sampling with point-mass drafts does too.
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "grammar/compile.h"
#include "spec/draft_model.h"
#include "spec/ngram.h"
#include "spec/suffix.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
using namespace zen::test;

// Drafts the given continuation of each prompt, one token in `wrong_every` replaced, so drafts
// are partly forbidden by the grammar and partly rejected by the target.
class ScriptProposer : public spec::Proposer {
 public:
  ScriptProposer(std::map<std::vector<int32_t>, std::vector<int32_t>> script, int32_t vocab)
      : script_(std::move(script)), vocab_(vocab) {}
  std::string_view name() const override { return "script"; }
  void propose(std::span<spec::DraftSlot> slots) override {
    for (spec::DraftSlot& s : slots) {
      const std::vector<int32_t> prompt(s.tokens.begin(), s.tokens.begin() + s.prompt_len);
      const auto it = script_.find(prompt);
      const auto have = static_cast<size_t>(static_cast<int64_t>(s.tokens.size()) - s.prompt_len);
      for (int32_t j = 0; j < s.max_tokens; ++j) {
        const size_t at = have + static_cast<size_t>(j);
        int32_t t = it != script_.end() && at < it->second.size() ? it->second[at] : static_cast<int32_t>(at * 7 % static_cast<size_t>(vocab_));
        if (++count_ % 5 == 0) t = (t + 3) % vocab_;
        s.draft.push_back(t);
      }
    }
  }

 private:
  std::map<std::vector<int32_t>, std::vector<int32_t>> script_;
  int32_t vocab_;
  int64_t count_ = 0;
};

class EngineConstrained : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = load_tiny_qwen3();
    // The tiny model has no tokenizer: give its ids JSON-ish bytes (1-2 characters each), so
    // a JSON grammar allows many tokens at every step. The model's EOS ends generation.
    const std::string alphabet = "{}[]:,\"ab01 -.truefls";
    std::vector<std::string> bytes(static_cast<size_t>(model_->config().vocab_size));
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = alphabet.substr(i % alphabet.size(), 1);
      if ((i / alphabet.size()) % 3 != 0) bytes[i] += alphabet[(i / alphabet.size()) % alphabet.size()];
    }
    std::vector<int32_t> stops(model_->config().eos_token_ids.begin(), model_->config().eos_token_ids.end());
    ASSERT_FALSE(stops.empty());
    vocab_ = std::make_shared<const grammar::Vocabulary>(std::move(bytes), stops);
    grammar::GrammarSpec spec;
    spec.kind = grammar::GrammarSpec::Kind::JsonSchema;
    spec.text = R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
                   "b": {"type": "string", "maxLength": 6}, "t": {"type": "boolean"}}, "required": ["a", "b"]})";
    grammar_ = std::make_shared<const grammar::CompiledGrammar>(grammar::build_grammar(spec), vocab_);
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    grammar_.reset();
    vocab_.reset();
  }
  static RequestParams constrained(int64_t max_tokens, float temperature = 0.0f) {
    RequestParams p;
    p.max_tokens = max_tokens;
    p.grammar = grammar_;
    p.stop_token_ids = model_->config().eos_token_ids;
    p.sampling.temperature = temperature;
    p.sampling.seed = 99;
    p.sampling.has_seed = true;
    p.top_logprobs = 2;
    return p;
  }
  static std::string text(const std::vector<int32_t>& tokens) {
    std::string s;
    for (int32_t t : tokens) s += vocab_->bytes(t);
    return s;
  }
  static void expect_follows_grammar(const std::vector<Outcome>& outs) {
    for (const Outcome& o : outs) {
      std::vector<int32_t> body = o.tokens;
      if (o.finish_reason == "stop") {
        ASSERT_FALSE(body.empty());
        body.pop_back();  // the stop token
      }
      const std::string s = text(body);
      EXPECT_EQ(grammar::viable_prefix(grammar_->grammar(), s), s.size()) << s;
      if (o.finish_reason == "stop") {
        EXPECT_TRUE(grammar::accepts(grammar_->grammar(), s)) << s;
      }
    }
  }
  static std::vector<Outcome> plain(const std::vector<std::vector<int32_t>>& prompts, const RequestParams& params) {
    Engine engine(*model_, pool_of(*model_, 256, 96));
    return run_all(engine, prompts, params);
  }
  static Model* model_;
  static std::shared_ptr<const grammar::Vocabulary> vocab_;
  static std::shared_ptr<const grammar::CompiledGrammar> grammar_;
};
Model* EngineConstrained::model_ = nullptr;
std::shared_ptr<const grammar::Vocabulary> EngineConstrained::vocab_;
std::shared_ptr<const grammar::CompiledGrammar> EngineConstrained::grammar_;

spec::ControllerOptions fixed_k(int32_t k) { return {.adaptive = false, .num_speculative_tokens = k}; }

TEST_F(EngineConstrained, OutputFollowsTheGrammarAndEndsWhereItMay) {
  const auto prompts = random_prompts(6, 5, 20, static_cast<int32_t>(model_->config().vocab_size), 3);
  const auto outs = plain(prompts, constrained(120));
  expect_follows_grammar(outs);
  int stopped = 0;
  for (const Outcome& o : outs) stopped += o.finish_reason == "stop";
  EXPECT_GT(stopped, 0) << "no output completed its document within max_tokens";
  expect_follows_grammar(plain(prompts, constrained(120, 1.0f)));
}

TEST_F(EngineConstrained, EveryProposerGivesConstrainedPlainDecodingsOutput) {
  const auto prompts = random_prompts(5, 5, 20, static_cast<int32_t>(model_->config().vocab_size), 4);
  const auto want = plain(prompts, constrained(80));
  expect_follows_grammar(want);
  std::map<std::vector<int32_t>, std::vector<int32_t>> script;
  for (size_t i = 0; i < prompts.size(); ++i) script[prompts[i]] = want[i].tokens;
  for (int kind = 0; kind < 4; ++kind) {
    std::unique_ptr<spec::Proposer> proposer;
    if (kind == 0) proposer = std::make_unique<ScriptProposer>(script, static_cast<int32_t>(model_->config().vocab_size));
    if (kind == 1) proposer = std::make_unique<spec::NgramProposer>(spec::NgramOptions{1, 4});
    if (kind == 2) proposer = std::make_unique<spec::SuffixProposer>(spec::SuffixOptions{});
    if (kind == 3) {
      auto draft = std::make_unique<spec::DraftModelProposer>(
          *model_, Model::load((fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models/qwen3_bf16_tied").string(),
                               {.n_threads = 2, .load_tokenizer = false}),
          spec::DraftModelOptions{});
      draft->reserve_kv(512 * 16);
      proposer = std::move(draft);
    }
    const std::string name(proposer->name());
    Engine engine(*model_, pool_of(*model_, 256, 96));
    engine.use_proposer(std::move(proposer), fixed_k(5));
    const auto got = run_all(engine, prompts, constrained(80));
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << name << " request " << i;
      EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << name << " request " << i;
    }
    if (kind != 1) {
      EXPECT_GT(engine.stats().spec_draft_tokens, 0) << name;
    }
    EXPECT_EQ(engine.stats().kv_blocks_used, 0) << name;
  }
}

TEST_F(EngineConstrained, SeededSamplingWithDraftsEqualsConstrainedPlainSampling) {
  const auto prompts = random_prompts(4, 5, 20, static_cast<int32_t>(model_->config().vocab_size), 5);
  const auto want = plain(prompts, constrained(60, 0.8f));
  expect_follows_grammar(want);
  std::map<std::vector<int32_t>, std::vector<int32_t>> script;
  for (size_t i = 0; i < prompts.size(); ++i) script[prompts[i]] = want[i].tokens;
  Engine engine(*model_, pool_of(*model_, 256, 96));
  engine.use_proposer(std::make_unique<ScriptProposer>(script, static_cast<int32_t>(model_->config().vocab_size)), fixed_k(4));
  const auto got = run_all(engine, prompts, constrained(60, 0.8f));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  EXPECT_GT(engine.stats().spec_accepted_tokens, 0);
}

}  // namespace
}  // namespace zen
