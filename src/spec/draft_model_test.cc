// The draft-model proposer: a draft that is the target itself drafts the target's greedy path
// (and the engine then accepts every draft), rollback by common prefix equals a fresh cache,
// sampled drafts come with a proper q, vocabulary mismatches are loud, and a tiny KV pool
// degrades to empty drafts without throwing or leaking blocks.
#include "spec/draft_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "base/error.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "spec/controller.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
using namespace zen::test;
using spec::DraftModelOptions;
using spec::DraftModelProposer;
using spec::DraftSlot;

std::unique_ptr<Model> load_fixture(const std::string& name) {
  return Model::load((fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models" / name).string(),
                     {.n_threads = 2, .load_tokenizer = false});
}

// The model's own greedy continuation of a prompt, one token at a time through a KvCache.
std::vector<int32_t> greedy_decode(Model& m, const std::vector<int32_t>& prompt, int32_t k) {
  const int64_t vocab = m.config().vocab_size;
  auto cache = m.new_cache(static_cast<int64_t>(prompt.size()) + k + 1);
  std::vector<float> logits(static_cast<size_t>(vocab));
  m.forward(*cache, prompt, logits.data(), false);
  std::vector<int32_t> out;
  for (int32_t j = 0; j < k; ++j) {
    out.push_back(argmax(logits.data(), vocab));
    if (j + 1 < k) m.forward(*cache, std::span<const int32_t>(&out.back(), 1), logits.data(), false);
  }
  return out;
}

DraftSlot slot_for(uint64_t id, const std::vector<int32_t>& tokens, int32_t k, const SamplingParams* sampling) {
  DraftSlot s;
  s.seq_id = id;
  s.tokens = tokens;
  s.prompt_len = static_cast<int64_t>(tokens.size());
  s.max_tokens = k;
  s.sampling = sampling;
  return s;
}

std::unique_ptr<DraftModelProposer> proposer_with(const Model& target, const std::string& draft, int64_t kv_tokens) {
  auto p = std::make_unique<DraftModelProposer>(target, load_fixture(draft), DraftModelOptions{});
  p->reserve_kv(kv_tokens);
  return p;
}

// One sequence's draft from a proposer that has never seen it.
std::vector<int32_t> fresh_draft(const Model& target, const std::string& draft, const std::vector<int32_t>& tokens,
                                 int32_t k) {
  auto p = proposer_with(target, draft, 4096);
  const SamplingParams greedy_params;
  std::vector<DraftSlot> slots{slot_for(1, tokens, k, &greedy_params)};
  p->propose(slots);
  return slots[0].draft;
}

class DraftModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { target_ = load_fixture("qwen3_f32").release(); }
  static void TearDownTestSuite() {
    delete target_;
    target_ = nullptr;
  }
  static int32_t vocab() { return static_cast<int32_t>(target_->config().vocab_size); }
  static Model* target_;
};
Model* DraftModel::target_ = nullptr;

TEST_F(DraftModel, GreedyDraftOfTheTargetItselfIsItsGreedyDecode) {
  auto p = proposer_with(*target_, "qwen3_f32", 4096);
  EXPECT_EQ(p->name(), "draft_model");
  EXPECT_EQ(p->kv_bytes_per_token(), KvPool::bytes_per_token(target_->config(), KvDType::F32));
  // Lengths around a block boundary, and one past the catch-up chunk (several forwards).
  auto prompts = random_prompts(6, 1, 40, vocab(), 7);
  prompts.push_back(random_prompts(1, 16, 16, vocab(), 8)[0]);
  prompts.push_back(random_prompts(1, 700, 700, vocab(), 9)[0]);
  const std::vector<int32_t> ks{1, 5, 8, 3, 2, 7, 4, 6};
  const SamplingParams greedy_params;
  SamplingParams top_k1;  // temperature with top_k 1 is greedy too
  top_k1.temperature = 0.7f;
  top_k1.top_k = 1;
  std::vector<DraftSlot> slots;
  for (size_t i = 0; i < prompts.size(); ++i)
    slots.push_back(slot_for(100 + i, prompts[i], ks[i], i % 2 ? &top_k1 : &greedy_params));
  p->propose(slots);
  // One catch-up forward per call: the 700-token prompt is fed 512 tokens and drafts nothing yet.
  EXPECT_TRUE(slots[7].draft.empty());
  EXPECT_EQ(p->cached_tokens(107), 512);
  EXPECT_EQ(slots[6].draft, greedy_decode(*target_, prompts[6], ks[6]));
  p->propose(slots);  // the rest of it; the others re-feed their last token and draft the same
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(slots[i].draft, greedy_decode(*target_, prompts[i], ks[i])) << "prompt " << i;
    EXPECT_TRUE(slots[i].q.empty());
    // Cached: the tokens and every draft but the last.
    EXPECT_EQ(p->cached_tokens(100 + i), static_cast<int64_t>(prompts[i].size()) + ks[i] - 1);
  }
  // Continue every sequence as a verifier accepting all drafts plus a bonus token would.
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto path = greedy_decode(*target_, prompts[i], ks[i] + 1);
    prompts[i].insert(prompts[i].end(), path.begin(), path.end());
    slots[i] = slot_for(100 + i, prompts[i], 4, &greedy_params);
  }
  p->propose(slots);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(slots[i].draft, greedy_decode(*target_, prompts[i], 4)) << "prompt " << i;
  for (size_t i = 0; i < prompts.size(); ++i) p->finish(100 + i, prompts[i], 0);
  EXPECT_EQ(p->free_blocks(), p->num_blocks());
  EXPECT_EQ(p->num_cached_sequences(), 0);
  EXPECT_EQ(p->forward_failures(), 0) << p->last_error();
}

TEST_F(DraftModel, RollbackToTheCommonPrefixEqualsAFreshCache) {
  // A different draft model (bf16, tied embeddings): drafts are its own, not the target's.
  auto p = proposer_with(*target_, "qwen3_bf16_tied", 4096);
  const SamplingParams greedy_params;
  const auto prompt = random_prompts(1, 37, 37, vocab(), 11)[0];
  std::vector<DraftSlot> slots{slot_for(1, prompt, 6, &greedy_params)};
  p->propose(slots);
  const auto first = slots[0].draft;
  ASSERT_EQ(first.size(), 6u);
  EXPECT_EQ(first, fresh_draft(*target_, "qwen3_bf16_tied", prompt, 6));

  // Rejected after two drafts: the target emitted something else at the third.
  auto rejected = prompt;
  rejected.insert(rejected.end(), first.begin(), first.begin() + 2);
  rejected.push_back((first[2] + 1) % vocab());
  // Diverged inside the prompt (a different request reusing the id would look like this).
  auto diverged = std::vector<int32_t>(prompt.begin(), prompt.begin() + 20);
  diverged.push_back((prompt[20] + 5) % vocab());
  diverged.push_back(3);
  // Preemption-like shrink: fewer tokens than cached, a prefix of them.
  const auto shrunk = std::vector<int32_t>(prompt.begin(), prompt.begin() + 17);
  // Every draft accepted and a bonus token: the cache has all but the bonus and last draft.
  auto accepted = prompt;
  accepted.insert(accepted.end(), first.begin(), first.end());
  accepted.push_back(5);

  const std::vector<const std::vector<int32_t>*> nexts{&rejected, &accepted, &diverged, &shrunk, &prompt};
  for (const std::vector<int32_t>* next : nexts) {
    slots = {slot_for(1, *next, 5, &greedy_params)};
    p->propose(slots);
    EXPECT_EQ(slots[0].draft, fresh_draft(*target_, "qwen3_bf16_tied", *next, 5)) << "length " << next->size();
    EXPECT_EQ(p->cached_tokens(1), static_cast<int64_t>(next->size()) + 4);
    // Blocks held: exactly what the cached tokens need.
    EXPECT_EQ(p->num_blocks() - p->free_blocks(), (static_cast<int64_t>(next->size()) + 4 + 15) / 16);
  }
  p->finish(1, prompt, 0);
  EXPECT_EQ(p->free_blocks(), p->num_blocks());
}

TEST_F(DraftModel, SampledDraftsComeWithTheirDistribution) {
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_k = 20;
  sampled.top_p = 0.95f;
  sampled.seed = 42;
  sampled.has_seed = true;
  sampled.repetition_penalty = 1.3f;  // the draft ignores penalties and bias ...
  sampled.logit_bias = {{5, 100.0f}};  // ... so token 5 is not forced
  const auto prompts = random_prompts(4, 5, 30, vocab(), 13);
  auto run = [&] {
    auto p = proposer_with(*target_, "qwen3_f32", 4096);
    std::vector<DraftSlot> slots;
    for (size_t i = 0; i < prompts.size(); ++i) slots.push_back(slot_for(i, prompts[i], 5, &sampled));
    p->propose(slots);
    return slots;
  };
  const auto a = run(), b = run();
  const auto V = static_cast<size_t>(vocab());
  int fives = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].draft.size(), 5u);
    ASSERT_EQ(a[i].q.size(), 5 * V);
    EXPECT_EQ(a[i].draft, b[i].draft) << "seeded: reproducible";
    EXPECT_EQ(a[i].q, b[i].q);
    for (size_t j = 0; j < 5; ++j) {
      const float* q = a[i].q.data() + j * V;
      const double sum = std::accumulate(q, q + V, 0.0);
      EXPECT_NEAR(sum, 1.0, 1e-5);
      EXPECT_GT(q[a[i].draft[j]], 0.0f);
      EXPECT_LE(std::count_if(q, q + V, [](float x) { return x > 0; }), 20);  // top_k
      fives += a[i].draft[j] == 5;
    }
  }
  EXPECT_LT(fives, 20);
  // q row 0 is the filtered distribution of the draft's logits for the last prompt token.
  auto cache = target_->new_cache(64);
  std::vector<float> logits(V);
  target_->forward(*cache, prompts[0], logits.data(), false);
  SamplingParams plain = sampled;
  plain.repetition_penalty = 1.0f;
  plain.logit_bias.clear();
  Sampler ref(plain, {});
  std::vector<float> want(V, 0.0f);
  for (const TokenProb& t : ref.distribution(logits.data(), vocab())) want[static_cast<size_t>(t.token)] = static_cast<float>(t.p);
  for (size_t t = 0; t < V; ++t) EXPECT_FLOAT_EQ(a[0].q[t], want[t]) << "token " << t;
}

// Checks every q the draft model hands the engine, then passes it on.
class CheckingProposer : public spec::Proposer {
 public:
  CheckingProposer(std::unique_ptr<DraftModelProposer> inner, int64_t vocab) : inner_(std::move(inner)), vocab_(vocab) {}
  std::string_view name() const override { return inner_->name(); }
  void propose(std::span<DraftSlot> slots) override {
    inner_->propose(slots);
    for (const DraftSlot& s : slots) {
      EXPECT_LE(s.draft.size(), static_cast<size_t>(s.max_tokens));
      if (s.q.empty()) continue;
      EXPECT_EQ(s.q.size(), s.draft.size() * static_cast<size_t>(vocab_));
      for (size_t j = 0; j < s.draft.size(); ++j) {
        const float* q = s.q.data() + static_cast<int64_t>(j) * vocab_;
        EXPECT_NEAR(std::accumulate(q, q + vocab_, 0.0), 1.0, 1e-5);
        EXPECT_GT(q[s.draft[j]], 0.0f);
        ++q_rows;
      }
    }
  }
  void observe(uint64_t id, std::span<const int32_t> t, int64_t pl, int32_t d, int32_t a) override {
    inner_->observe(id, t, pl, d, a);
  }
  void finish(uint64_t id, std::span<const int32_t> t, int64_t pl) override { inner_->finish(id, t, pl); }
  double cost_seconds(int64_t seqs, int32_t k) const override { return inner_->cost_seconds(seqs, k); }
  DraftModelProposer& inner() { return *inner_; }
  int64_t q_rows = 0;

 private:
  std::unique_ptr<DraftModelProposer> inner_;
  int64_t vocab_;
};

class DraftModelEngine : public DraftModel {
 protected:
  static std::vector<Outcome> plain(const std::vector<std::vector<int32_t>>& prompts, const RequestParams& params) {
    Engine engine(*target_, pool_of(*target_, 256, 96));
    return run_all(engine, prompts, params);
  }
  static void expect_same(const std::vector<Outcome>& got, const std::vector<Outcome>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
      EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << "request " << i;
      ASSERT_EQ(got[i].details.size(), want[i].details.size());
      for (size_t t = 0; t < got[i].details.size(); ++t)
        EXPECT_EQ(got[i].details[t].logprob, want[i].details[t].logprob) << "request " << i << " token " << t;
    }
  }
  // Runs the prompts at once with the draft model `draft` proposing k = 4.
  static std::pair<std::vector<Outcome>, EngineStats> speculate(const std::string& draft,
                                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                                 const RequestParams& params, int64_t* q_rows = nullptr) {
    const EngineOptions options = pool_of(*target_, 256, 96);
    Engine engine(*target_, options);
    auto proposer = std::make_unique<DraftModelProposer>(*target_, load_fixture(draft), DraftModelOptions{});
    proposer->reserve_kv(256 * options.block_size);  // the target pool's token capacity
    auto checking = std::make_unique<CheckingProposer>(std::move(proposer), target_->config().vocab_size);
    CheckingProposer* seen = checking.get();
    engine.use_proposer(std::move(checking), spec::ControllerOptions{.adaptive = false, .num_speculative_tokens = 4});
    auto out = run_all(engine, prompts, params);
    // Every request finished: its draft cache is gone.
    EXPECT_EQ(seen->inner().num_cached_sequences(), 0);
    EXPECT_EQ(seen->inner().free_blocks(), seen->inner().num_blocks());
    EXPECT_EQ(seen->inner().forward_failures(), 0) << seen->inner().last_error();
    EXPECT_GT(seen->inner().cost_seconds(8, 4), 0.0);
    std::cout << "[ draft " << draft << " ] measured propose cost: 1 seq k=4 "
              << seen->inner().cost_seconds(1, 4) * 1e3 << " ms, 8 seqs k=4 " << seen->inner().cost_seconds(8, 4) * 1e3
              << " ms\n";
    if (q_rows) *q_rows = seen->q_rows;
    return {std::move(out), engine.stats()};
  }
};

TEST_F(DraftModelEngine, GreedyOutputIsPlainDecodingAndTheTargetAsDraftIsAlwaysAccepted) {
  const auto prompts = random_prompts(8, 5, 40, vocab(), 21);
  RequestParams params = greedy(26);
  params.top_logprobs = 2;
  const auto want = plain(prompts, params);
  {
    const auto [got, stats] = speculate("qwen3_f32", prompts, params);
    expect_same(got, want);
    EXPECT_GT(stats.spec_draft_tokens, 0);
    EXPECT_EQ(stats.spec_accepted_tokens, stats.spec_draft_tokens);
    EXPECT_EQ(stats.kv_blocks_used, 0);
    EXPECT_LT(stats.steps, stats.generated_tokens);
  }
  {
    const auto [got, stats] = speculate("qwen3_bf16_tied", prompts, params);  // a real, imperfect draft
    expect_same(got, want);
    EXPECT_GT(stats.spec_draft_tokens, 0);
    EXPECT_LE(stats.spec_accepted_tokens, stats.spec_draft_tokens);
    std::cout << "[ qwen3_bf16_tied drafting for qwen3_f32 ] accepted " << stats.spec_accepted_tokens << " of "
              << stats.spec_draft_tokens << "\n";
  }
}

TEST_F(DraftModelEngine, SampledRequestsRunWithTheDraftsDistribution) {
  const auto prompts = random_prompts(8, 5, 40, vocab(), 23);
  RequestParams params;
  params.max_tokens = 24;
  params.ignore_eos = true;
  params.sampling.temperature = 0.8f;
  params.sampling.seed = 7;
  params.sampling.has_seed = true;
  int64_t q_rows = 0;
  const auto [got, stats] = speculate("qwen3_f32", prompts, params, &q_rows);
  for (const Outcome& o : got) {
    EXPECT_EQ(o.tokens.size(), 24u);
    EXPECT_EQ(o.finish_reason, "length");
  }
  EXPECT_GT(q_rows, 0);
  EXPECT_GT(stats.spec_draft_tokens, 0);
  EXPECT_GT(stats.spec_accepted_tokens, 0);  // p == q: accepted nearly always
  EXPECT_EQ(stats.kv_blocks_used, 0);
  // Seeded: the same outputs again.
  const auto [again, stats2] = speculate("qwen3_f32", prompts, params);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(again[i].tokens, got[i].tokens);
}

// Byte-level BPE tokenizer.json: the 256 byte tokens, one token per merge, and added tokens.
nlohmann::json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                              const std::vector<std::string>& added = {}) {
  using nlohmann::json;
  json vocab = json::object();
  uint32_t next_unprintable = 256;  // GPT-2's bytes_to_unicode
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : next_unprintable++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[s] = b;
  }
  json merge_list = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(json::array({a, b}));
  }
  json added_tokens = json::array();
  for (const std::string& content : added)
    added_tokens.push_back({{"id", id++}, {"content", content}, {"special", true}, {"lstrip", false},
                            {"rstrip", false}, {"normalized", false}, {"single_word", false}});
  return {{"version", "1.0"},
          {"added_tokens", added_tokens},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

std::string mismatch_message(const Tokenizer& target, const Tokenizer& draft) {
  try {
    spec::check_same_vocabulary(target, draft);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DraftModelVocabulary, MismatchedTokenizersNameTheFirstDifferingToken) {
  const auto base = Tokenizer::from_tokenizer_json(tiny_tokenizer({{"h", "e"}, {"l", "l"}, {"ll", "o"}}).dump());
  const auto same = Tokenizer::from_tokenizer_json(tiny_tokenizer({{"h", "e"}, {"l", "l"}, {"ll", "o"}}).dump());
  EXPECT_EQ(mismatch_message(*base, *same), "");
  const auto other = Tokenizer::from_tokenizer_json(tiny_tokenizer({{"h", "e"}, {"l", "o"}, {"lo", "l"}}).dump());
  const std::string m = mismatch_message(*base, *other);
  EXPECT_NE(m.find("token id 257"), std::string::npos) << m;
  EXPECT_NE(m.find("target \"ll\""), std::string::npos) << m;
  EXPECT_NE(m.find("draft \"lo\""), std::string::npos) << m;
  // Padding rows past the real vocabulary are fine; a real extra token is not.
  const auto padded =
      Tokenizer::from_tokenizer_json(tiny_tokenizer({{"h", "e"}, {"l", "l"}, {"ll", "o"}}, {"[PAD259]", "[PAD260]"}).dump());
  EXPECT_EQ(mismatch_message(*base, *padded), "");
  EXPECT_EQ(mismatch_message(*padded, *base), "");
  const auto extra =
      Tokenizer::from_tokenizer_json(tiny_tokenizer({{"h", "e"}, {"l", "l"}, {"ll", "o"}}, {"<think>"}).dump());
  const std::string e = mismatch_message(*base, *extra);
  EXPECT_NE(e.find("token id 259"), std::string::npos) << e;
  EXPECT_NE(e.find("draft \"<think>\""), std::string::npos) << e;
  EXPECT_NE(e.find("target none"), std::string::npos) << e;
}

TEST(DraftModelVocabulary, Qwen3AndQwen25TokenizersDifferInTheirAddedTokens) {
  const fs::path data = fs::path(ZEN_SOURCE_DIR) / "../shared/data/tokenizers";
  if (!fs::exists(data / "qwen3/tokenizer.json") || !fs::exists(data / "qwen2_5/tokenizer.json"))
    GTEST_SKIP() << "no Qwen tokenizers under " << data;
  const auto qwen3 = Tokenizer::load((data / "qwen3").string());
  const auto qwen25 = Tokenizer::load((data / "qwen2_5/tokenizer.json").string());
  EXPECT_EQ(mismatch_message(*qwen3, *qwen3), "");
  const std::string m = mismatch_message(*qwen3, *qwen25);
  EXPECT_NE(m.find("token id 151665"), std::string::npos) << m;
  std::cout << m << "\n";
}

TEST(DraftModelVocabulary, ModelsWithTokenizersMayDifferInPaddingRowsOnly) {
  const std::vector<std::pair<std::string, std::string>> merges{{"h", "e"}, {"l", "l"}, {"ll", "o"}};
  auto target = load_fixture("qwen3_f32");  // vocab_size 288
  target->attach_tokenizer(Tokenizer::from_tokenizer_json(tiny_tokenizer(merges).dump()));  // 259 tokens
  // A draft with more rows (qwen2_f32: vocab_size 320) and [PAD<id>] tokens past the real ones.
  auto draft = load_fixture("qwen2_f32");
  draft->attach_tokenizer(Tokenizer::from_tokenizer_json(tiny_tokenizer(merges, {"[PAD259]", "[PAD260]"}).dump()));
  EXPECT_EQ(spec::check_draft_compatible(*target, *draft), 259);
  DraftModelProposer p(*target, std::move(draft), DraftModelOptions{});
  p.reserve_kv(256);
  SamplingParams sampled;
  sampled.temperature = 1.5f;
  sampled.seed = 3;
  sampled.has_seed = true;
  const auto prompt = random_prompts(1, 12, 12, 259, 5)[0];
  std::vector<DraftSlot> slots{slot_for(1, prompt, 4, &sampled)};
  p.propose(slots);
  ASSERT_EQ(slots[0].draft.size(), 4u);
  ASSERT_EQ(slots[0].q.size(), 4u * 288);  // the target's vocabulary
  for (size_t j = 0; j < 4; ++j) {
    const float* q = slots[0].q.data() + j * 288;
    EXPECT_NEAR(std::accumulate(q, q + 288, 0.0), 1.0, 1e-5);
    EXPECT_TRUE(std::all_of(q + 259, q + 288, [](float x) { return x == 0.0f; })) << "padding rows drafted";
    EXPECT_LT(slots[0].draft[j], 259);
  }
  // A draft whose tokenizer differs: loud, naming the token.
  auto other = load_fixture("qwen3_bf16_tied");
  other->attach_tokenizer(Tokenizer::from_tokenizer_json(tiny_tokenizer({{"h", "e"}, {"l", "o"}, {"lo", "l"}}).dump()));
  try {
    DraftModelProposer bad(*target, std::move(other), DraftModelOptions{});
    ADD_FAILURE() << "a different vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 257: target \"ll\", draft \"lo\""), std::string::npos) << e.what();
  }
  // Without a draft tokenizer the config sizes must match: 320 rows cannot be checked.
  EXPECT_THROW(DraftModelProposer(*target, load_fixture("qwen2_f32"), DraftModelOptions{}), Error);
  EXPECT_NO_THROW(DraftModelProposer(*target, load_fixture("qwen3_bf16_tied"), DraftModelOptions{}));
}

TEST_F(DraftModel, ModelsWithoutTokenizersNeedEqualVocabSizesAndAttentionOnly) {
  const DraftModelOptions o;
  try {
    DraftModelProposer p(*target_, load_fixture("qwen2_f32"), o);  // vocab 320 vs 288
    ADD_FAILURE() << "a different vocab_size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size 320 differs from the target's 288"), std::string::npos) << e.what();
  }
  try {
    DraftModelProposer p(*target_, load_fixture("qwen3_5_text_f32"), o);
    ADD_FAILURE() << "a hybrid draft was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent"), std::string::npos) << e.what();
  }
  // A path that is not a checkpoint is reported by the loader.
  EXPECT_THROW(DraftModelProposer(*target_, DraftModelOptions{.path = "/nonexistent/draft"}), Error);
  // Same family, same vocabulary: loads from a path too.
  const std::string path = (fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models/qwen3_bf16_tied").string();
  DraftModelProposer p(*target_, DraftModelOptions{.path = path, .n_threads = 1});
  EXPECT_EQ(p.draft().config().torch_dtype, "bfloat16");
  EXPECT_TRUE(p.draft().config().tie_word_embeddings);
}

TEST_F(DraftModel, ExhaustedPoolGivesEmptyDraftsEvictsIdleSequencesAndLeaksNothing) {
  const SamplingParams greedy_params;
  auto p = std::make_unique<DraftModelProposer>(*target_, load_fixture("qwen3_f32"), DraftModelOptions{});
  const std::vector<int32_t> three{1, 2, 3};
  std::vector<DraftSlot> none{slot_for(1, three, 2, &greedy_params)};
  EXPECT_THROW(p->propose(none), Error);  // reserve_kv first
  p->reserve_kv(64);                      // 4 blocks of 16
  ASSERT_EQ(p->num_blocks(), 4);
  const auto prompts = random_prompts(6, 20, 20, vocab(), 17);  // 20 + 4 - 1 tokens: 2 blocks each
  std::vector<DraftSlot> slots;
  for (uint64_t i = 0; i < 3; ++i) slots.push_back(slot_for(i, prompts[i], 4, &greedy_params));
  ASSERT_NO_THROW(p->propose(slots));
  EXPECT_EQ(slots[0].draft, greedy_decode(*target_, prompts[0], 4));
  EXPECT_EQ(slots[1].draft, greedy_decode(*target_, prompts[1], 4));
  EXPECT_TRUE(slots[2].draft.empty());
  EXPECT_EQ(p->free_blocks(), 0);
  // Sequences 3 and 4 now: 0 and 1 are idle and evicted (least recently used first).
  slots = {slot_for(3, prompts[3], 4, &greedy_params), slot_for(4, prompts[4], 4, &greedy_params)};
  ASSERT_NO_THROW(p->propose(slots));
  EXPECT_EQ(slots[0].draft, greedy_decode(*target_, prompts[3], 4));
  EXPECT_EQ(slots[1].draft, greedy_decode(*target_, prompts[4], 4));
  EXPECT_EQ(p->evictions(), 2);
  EXPECT_EQ(p->cached_tokens(0), 0);
  // Room for the catch-up but not for every draft: k shrinks to what fits (2 blocks left
  // after evicting 3: 32 tokens for 30 + k - 1).
  const auto long_prompt = random_prompts(1, 30, 30, vocab(), 19)[0];
  slots = {slot_for(4, prompts[4], 4, &greedy_params), slot_for(5, long_prompt, 8, &greedy_params)};
  ASSERT_NO_THROW(p->propose(slots));
  EXPECT_EQ(slots[0].draft.size(), 4u);
  EXPECT_EQ(slots[1].draft, greedy_decode(*target_, long_prompt, 3));
  EXPECT_EQ(p->evictions(), 3);
  // Longer than the whole pool: an empty draft, nothing evicted for it, the others unaffected.
  const auto huge = random_prompts(1, 80, 80, vocab(), 20)[0];
  slots = {slot_for(6, huge, 4, &greedy_params), slot_for(4, prompts[4], 2, &greedy_params)};
  ASSERT_NO_THROW(p->propose(slots));
  EXPECT_TRUE(slots[0].draft.empty());
  EXPECT_EQ(slots[1].draft, greedy_decode(*target_, prompts[4], 2));
  EXPECT_EQ(p->evictions(), 3);
  EXPECT_EQ(p->cached_tokens(5), 32);
  // A token the draft cannot embed: an empty draft, no error.
  auto bad = prompts[2];
  bad.push_back(vocab() + 3);
  slots = {slot_for(7, bad, 4, &greedy_params)};
  ASSERT_NO_THROW(p->propose(slots));
  EXPECT_TRUE(slots[0].draft.empty());
  EXPECT_EQ(p->forward_failures(), 0) << p->last_error();
  for (uint64_t i = 0; i < 8; ++i) p->finish(i, {}, 0);
  EXPECT_EQ(p->free_blocks(), p->num_blocks());
  EXPECT_EQ(p->num_cached_sequences(), 0);
}

TEST_F(DraftModel, CostIsMeasuredPerBatchSize) {
  auto p = proposer_with(*target_, "qwen3_f32", 4096);
  EXPECT_EQ(p->cost_seconds(4, 3), 0.0);  // nothing measured yet
  const auto prompts = random_prompts(4, 10, 20, vocab(), 29);
  const SamplingParams greedy_params;
  std::vector<DraftSlot> slots;
  for (uint64_t i = 0; i < 4; ++i) slots.push_back(slot_for(i, prompts[i], 6, &greedy_params));
  p->propose(slots);
  // Unmeasured (sequences, k): k forwards plus the catch-up one, from per-forward times.
  const double c4 = p->cost_seconds(4, 3);
  EXPECT_GT(c4, 0.0);
  EXPECT_DOUBLE_EQ(p->cost_seconds(4, 7), 2 * c4);
  // A call that caught up on prompts is not a drafting step's cost: still the estimate.
  EXPECT_DOUBLE_EQ(p->cost_seconds(4, 6), 7 * c4 / 4);
  // A drafting step (one token to catch up each) is measured as a whole call.
  p->propose(slots);
  EXPECT_GT(p->cost_seconds(4, 6), 0.0);
  EXPECT_NE(p->cost_seconds(4, 6), 7 * p->cost_seconds(4, 3) / 4);
  EXPECT_GT(p->cost_seconds(1, 3), 0.0);
  EXPECT_GT(p->cost_seconds(64, 3), 0.0);
  EXPECT_EQ(p->cost_seconds(0, 3), 0.0);
}

TEST_F(DraftModel, CatchUpCostCountsWhatTheCacheLacksBeyondAStep) {
  auto p = proposer_with(*target_, "qwen3_f32", 4096);
  const auto prompt = random_prompts(1, 200, 201, vocab(), 31)[0];
  EXPECT_EQ(p->catch_up_seconds(7, prompt), 0.0);  // nothing measured yet: nothing to charge
  const SamplingParams greedy_params;
  std::vector<int32_t> head(prompt.begin(), prompt.begin() + 40);
  const auto other = random_prompts(1, 300, 301, vocab(), 32)[0];
  std::vector<DraftSlot> slots{slot_for(7, head, 4, &greedy_params), slot_for(9, other, 4, &greedy_params)};
  p->propose(slots);  // measures a 340-token forward (and 2-token ones); caches 7's 40 tokens
  // An unknown sequence: its whole prompt, in chunks of at most 512 tokens a forward.
  EXPECT_GT(p->catch_up_seconds(8, prompt), 0.0);
  // The known one lacks 160 tokens: less than an unknown one of the same length.
  EXPECT_GT(p->catch_up_seconds(7, prompt), 0.0);
  EXPECT_LT(p->catch_up_seconds(7, prompt), p->catch_up_seconds(8, prompt));
  // A drafting step's usual catch-up (the bonus token, and the last draft when all were
  // accepted) is in cost_seconds instead; a stretch without drafts is not (a probe pays it).
  std::vector<int32_t> next(prompt.begin(), prompt.begin() + 40 + DraftModelProposer::kStepCatchUp);
  EXPECT_EQ(p->catch_up_seconds(7, next), 0.0);
  std::vector<int32_t> idle(prompt.begin(), prompt.begin() + 50);
  EXPECT_GT(p->catch_up_seconds(7, idle), 0.0);
  EXPECT_LT(p->catch_up_seconds(7, idle), p->catch_up_seconds(7, prompt));
}

}  // namespace
}  // namespace zen
