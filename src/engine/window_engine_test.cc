// The engine on a model with sliding-window layers (tests/fixtures/models/qwen3_sliding: one
// full layer, two sliding ones with a window of 7): the sliding layers' K/V live in a pool
// bounded by the window, and every output equals single-sequence generation, whose cache
// keeps every position. Prompts are longer than the window, so the window is exercised.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "base/error.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/generate.h"
#include "engine/window_blocks.h"
#include "spec/proposer.h"

namespace zen {
namespace {

using namespace zen::test;

// What one sequence generates alone, through a cache that keeps every position.
std::vector<int32_t> generate_alone(Model& model, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.ignore_eos = true;
  return generate(model, prompt, g).tokens;
}

// An engine of max_seqs sequences and steps of batched_tokens, in 8 MiB of KV.
EngineOptions sliding_options(int64_t max_seqs, int64_t batched_tokens) {
  EngineOptions o;
  o.kv_memory_bytes = int64_t{8} << 20;
  o.max_num_seqs = max_seqs;
  o.max_num_batched_tokens = batched_tokens;
  return o;
}

// Same tokens, log-probabilities and top log-probabilities, bit for bit.
void expect_same_details(const Outcome& got, const Outcome& want) {
  ASSERT_EQ(got.details.size(), want.details.size());
  for (size_t i = 0; i < want.details.size(); ++i) {
    EXPECT_EQ(got.details[i].token, want.details[i].token) << "token " << i;
    EXPECT_EQ(got.details[i].logprob, want.details[i].logprob) << "token " << i;
    ASSERT_EQ(got.details[i].top.size(), want.details[i].top.size());
    for (size_t k = 0; k < want.details[i].top.size(); ++k)
      EXPECT_EQ(got.details[i].top[k].logprob, want.details[i].top[k].logprob) << "token " << i;
  }
}

class EngineSliding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(std::string(ZEN_SOURCE_DIR) + "/tests/fixtures/models/qwen3_sliding",
                         {.n_threads = 2, .load_tokenizer = false})
                 .release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static int32_t vocab() { return static_cast<int32_t>(model_->config().vocab_size); }
  static std::vector<int32_t> reference(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    return generate_alone(*model_, prompt, max_tokens);
  }
  static EngineOptions options(int64_t max_seqs = 16, int64_t batched_tokens = 64) {
    return sliding_options(max_seqs, batched_tokens);
  }
  static Model* model_;
};
Model* EngineSliding::model_ = nullptr;

TEST_F(EngineSliding, TheWindowPoolIsBoundedByTheWindowNotTheContext) {
  Engine engine(*model_, options());
  const std::string d = engine.describe();
  const int64_t blocks = WindowBlocks::blocks_needed(7, 16, 16, 64);
  EXPECT_NE(d.find("Sliding-window layers: 2 of 3 KV layers keep their last 7 positions apart, " + std::to_string(blocks) +
                   " blocks"),
            std::string::npos)
      << d;
  // The main pool holds the full layer only: 3x the tokens the same memory holds for all three.
  const auto full_token = static_cast<int64_t>(KvPool::bytes_per_token(model_->config(), KvDType::F32));
  EXPECT_GT(engine.kv_capacity_tokens(), 2 * ((int64_t{8} << 20) / full_token));
}

TEST_F(EngineSliding, ConcurrentGreedyEqualsGenerationAlone) {
  const auto prompts = random_prompts(16, 8, 120, vocab(), 71);
  EngineOptions o = options();
  o.prefix_cache = false;
  Engine engine(*model_, o);
  const auto got = run_all(engine, prompts, greedy(40));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, reference(prompts[i], 40)) << "prompt " << i;
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST_F(EngineSliding, PreemptionUnderATinyPoolLosesNothing) {
  const auto prompts = random_prompts(8, 20, 60, vocab(), 72);
  EngineOptions o = options(8, 32);
  // 10 main-pool blocks of 16 tokens (the full layer's K/V only): any one request fits
  // (at most 100 tokens), all eight at once do not.
  const auto block = static_cast<int64_t>(KvPool::bytes_per_token(model_->config().kv_group_config(false), o.kv_dtype)) * 16;
  const auto window_block =
      static_cast<int64_t>(KvPool::bytes_per_token(model_->config().kv_group_config(true), o.kv_dtype)) * 16;
  o.kv_memory_bytes = 10 * (block + window_block);
  Engine engine(*model_, o);
  const auto got = run_all(engine, prompts, greedy(40));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, reference(prompts[i], 40)) << "prompt " << i;
  EXPECT_GT(engine.stats().preemptions, 0);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// A warm prefix is used while its window's rows are still held, and gives what a cold run
// gives; once other sequences have recycled them, the prefix is recomputed, with the same
// result.
TEST_F(EngineSliding, WarmPrefixNeedsItsWindowHeld) {
  const auto prompt = random_prompts(1, 100, 100, vocab(), 73)[0];
  RequestParams params = greedy(6);
  params.top_logprobs = 5;
  Engine engine(*model_, options(2, 32));  // a small window pool: 2 sequences, 32-token steps
  const auto cold = run_all(engine, {prompt}, params);
  const auto warm = run_all(engine, {prompt}, params);
  EXPECT_EQ(cold[0].cached_prompt_tokens, 0);
  EXPECT_EQ(warm[0].cached_prompt_tokens, 96);
  expect_same_details(warm[0], cold[0]);
  // Other long prompts pass through the window pool and recycle every block of it.
  run_all(engine, random_prompts(4, 150, 180, vocab(), 74), greedy(4));
  const auto recycled = run_all(engine, {prompt}, params);
  EXPECT_LT(recycled[0].cached_prompt_tokens, 96);
  expect_same_details(recycled[0], cold[0]);
  EXPECT_EQ(cold[0].tokens, reference(prompt, 6));
}

// The same weights with every layer sliding (config.json's layer_types rewritten in a
// temporary folder): the main pool keeps no K/V at all, only block ids, and the whole cache
// is the window pool, whatever the context length.
class EngineAllSliding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    namespace fs = std::filesystem;
    const fs::path from = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models/qwen3_sliding";
    dir_ = fs::temp_directory_path() / ("zen_all_sliding_" + std::to_string(getpid()));
    fs::remove_all(dir_);  // a crashed run's, under a reused pid
    fs::create_directories(dir_);
    std::ifstream in(from / "config.json");
    std::stringstream text;
    text << in.rdbuf();
    std::string config = text.str();
    const std::string full = "\"full_attention\"";
    config.replace(config.find(full), full.size(), "\"sliding_attention\"");
    std::ofstream(dir_ / "config.json") << config;
    fs::copy_file(from / "model.safetensors", dir_ / "model.safetensors");
    model_ = Model::load(dir_.string(), {.n_threads = 2, .load_tokenizer = false}).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    std::filesystem::remove_all(dir_);
  }
  static int32_t vocab() { return static_cast<int32_t>(model_->config().vocab_size); }
  static std::vector<int32_t> reference(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    return generate_alone(*model_, prompt, max_tokens);
  }
  // One window-pool block of all three layers.
  static int64_t window_block() {
    return static_cast<int64_t>(KvPool::bytes_per_token(model_->config(), KvDType::F32)) * 16;
  }
  // The engine keeps the K/V in the window pool alone, `window_blocks` blocks of it.
  static void expect_window_only(const Engine& engine, int64_t window_blocks) {
    const std::string d = engine.describe();
    EXPECT_NE(d.find("KV cache: no layer keeps every position; block tables for "), std::string::npos) << d;
    EXPECT_NE(d.find("Sliding-window layers: 3 of 3 KV layers keep their last 7 positions apart, " +
                     std::to_string(window_blocks) + " blocks"),
              std::string::npos)
        << d;
  }
  static std::filesystem::path dir_;
  static Model* model_;
};
std::filesystem::path EngineAllSliding::dir_;
Model* EngineAllSliding::model_ = nullptr;

TEST_F(EngineAllSliding, EveryLayerKeepsOnlyItsWindow) {
  ASSERT_EQ(model_->config().num_window_kv_layers(), 3);
  EngineOptions o;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 32;
  const int64_t blocks = WindowBlocks::blocks_needed(7, 16, 4, 32);
  o.kv_memory_bytes = blocks * window_block();  // the window pool and nothing else
  Engine engine(*model_, o);
  expect_window_only(engine, blocks);
  EXPECT_EQ(engine.kv_capacity_tokens(), 4 * 256);  // ids for 4 sequences at the context window
  // The whole context, though the budget holds the K/V of fewer than 256 positions.
  EXPECT_LT(o.kv_memory_bytes / (window_block() / 16), 256);
  EXPECT_EQ(engine.context_window(), 256);
  const auto prompts = random_prompts(4, 150, 200, vocab(), 75);
  const auto got = run_all(engine, prompts, greedy(50));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, reference(prompts[i], 50)) << "prompt " << i;
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// Block ids cost only bookkeeping, but that too is bounded by the budget: the longest
// context a request may ask for, for the most sequences, does not make a billion of them.
TEST_F(EngineAllSliding, TheBlockIdsAreBoundedByTheBudgetWhateverTheContext) {
  EngineOptions o = sliding_options(EngineOptions::kMaxNumSeqs, 64);
  o.kv_memory_bytes = int64_t{64} << 20;  // holds the window pool of 1024 sequences (37 MiB)
  o.context_window = EngineOptions::kMaxContextWindow;  // 2^30 block ids at 16 tokens a block
  Engine engine(*model_, o);
  EXPECT_EQ(engine.kv_capacity_tokens() / 16, o.kv_memory_bytes / Engine::kBlockIdBytes);
}

// A proposer that keeps KV per token sizes it by the main pool's blocks: on a pool of ids
// (bounded by their bookkeeping, not by KV bytes) that would overrun the budget, so adding
// one after the engine was built is refused.
TEST_F(EngineAllSliding, AProposerKeepingKvIsNotAddedToAPoolOfIds) {
  struct KeepsKv : spec::Proposer {
    std::string_view name() const override { return "keeps-kv"; }
    void propose(std::span<spec::DraftSlot> slots) override { (void)slots; }
    size_t kv_bytes_per_token() const override { return 1; }
  };
  Engine engine(*model_, sliding_options(2, 32));
  try {
    engine.use_proposer(std::make_unique<KeepsKv>(), {});
    FAIL() << "the proposer was added";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("main pool keeps no K/V"), std::string::npos) << e.what();
  }
}

TEST_F(EngineAllSliding, ConcurrentGreedyEqualsGenerationAlone) {
  const auto prompts = random_prompts(16, 8, 120, vocab(), 76);
  Engine engine(*model_, sliding_options(16, 64));
  expect_window_only(engine, WindowBlocks::blocks_needed(7, 16, 16, 64));
  const auto got = run_all(engine, prompts, greedy(40));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, reference(prompts[i], 40)) << "prompt " << i;
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// A warm prefix serves from the window pool alone while its window's rows are held.
TEST_F(EngineAllSliding, AWarmPrefixGivesWhatAColdRunGives) {
  const auto prompt = random_prompts(1, 100, 100, vocab(), 78)[0];
  RequestParams params = greedy(6);
  params.top_logprobs = 5;
  Engine engine(*model_, sliding_options(2, 32));
  expect_window_only(engine, WindowBlocks::blocks_needed(7, 16, 2, 32));
  const auto cold = run_all(engine, {prompt}, params);
  const auto warm = run_all(engine, {prompt}, params);
  EXPECT_EQ(cold[0].cached_prompt_tokens, 0);
  EXPECT_EQ(warm[0].cached_prompt_tokens, 96);
  expect_same_details(warm[0], cold[0]);
  EXPECT_EQ(cold[0].tokens, reference(prompt, 6));
}

TEST_F(EngineAllSliding, ABudgetShortOfTheWindowPoolCutsTheBlockIdsAndPreempts) {
  const auto prompts = random_prompts(8, 20, 60, vocab(), 77);
  EngineOptions o;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 32;
  o.kv_memory_bytes = 10 * window_block();  // far short of the 8 sequences' window pool
  Engine engine(*model_, o);
  expect_window_only(engine, 10);  // and 10 block ids: no more tokens than the pool holds
  EXPECT_EQ(engine.kv_capacity_tokens(), 10 * 16);
  EXPECT_EQ(engine.context_window(), 10 * 16);
  const auto got = run_all(engine, prompts, greedy(40));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, reference(prompts[i], 40)) << "prompt " << i;
  EXPECT_GT(engine.stats().preemptions, 0);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

}  // namespace
}  // namespace zen
