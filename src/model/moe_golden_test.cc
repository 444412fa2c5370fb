// Qwen3-MoE and Qwen2-MoE fixtures (tools/make_moe_fixtures.py) beyond the generic golden tests, which
// already hold their logits, greedy tokens and chunked prefill to transformers':
//  - the sparse-layer rule of the config agrees with the tensors transformers saved;
//  - batch invariance: a sequence's logits are bit-identical alone and inside a ForwardBatch
//    with other sequences (prefill chunks and decode steps), since routing groups tokens of
//    all sequences by expert;
//  - the GGUF export of qwen3_moe_bf16_tied (llama.cpp's stacked-expert layout) loads and gives
//    the HF folder's logits bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/model.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
const fs::path kModels = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models";

std::vector<std::string> moe_fixtures() {
  std::vector<std::string> names;
  for (const char* name : {"qwen3_moe_f32", "qwen3_moe_step2", "qwen3_moe_bf16_tied", "qwen2_moe_shared"})
    if (fs::is_directory(kModels / name)) names.push_back(name);
  return names;
}

std::vector<int32_t> reference_prompt(const std::string& name) {
  SafetensorsFile file((kModels / (name + ".reference.safetensors")).string());
  for (const TensorView& t : file.tensors())
    if (t.name == "prompt") {
      std::vector<int32_t> ids(static_cast<size_t>(t.numel()));
      std::memcpy(ids.data(), t.data, t.nbytes);
      return ids;
    }
  ADD_FAILURE() << name << ": no prompt";
  return {};
}

class MoeGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = Model::load((kModels / GetParam()).string(), {.n_threads = 2, .load_tokenizer = false});
    prompt_ = reference_prompt(GetParam());
  }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
};

TEST_P(MoeGolden, SparseLayersFollowTheConfig) {
  const ModelConfig& cfg = model_->config();
  EXPECT_TRUE(cfg.architecture == "qwen3_moe" || cfg.architecture == "qwen2_moe") << cfg.architecture;
  ASSERT_GT(cfg.num_experts, 0);
  int sparse = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string router = "model.layers." + std::to_string(l) + ".mlp.gate.weight";
    EXPECT_EQ(cfg.is_sparse_layer(l), model_->checkpoint().has(router)) << "layer " << l;
    sparse += cfg.is_sparse_layer(l) ? 1 : 0;
  }
  EXPECT_GT(sparse, 0);
}

// Sequence A alone, then with B and C around it in one batch (prefill), then one decode step
// of all three; A's rows must be bit-identical.
TEST_P(MoeGolden, BatchInvariant) {
  const ModelConfig& cfg = model_->config();
  const int64_t V = cfg.vocab_size;
  const std::span<const int32_t> a(prompt_);
  std::vector<int32_t> b(prompt_.rbegin(), prompt_.rbegin() + 11), c(prompt_.begin() + 3, prompt_.begin() + 10);
  const int32_t next_a = 5, next_b = 6, next_c = 7;

  // Alone: blocks 0, 1 of its own pool.
  KvPool alone_pool(cfg, 4);
  const std::vector<int32_t> alone_blocks = {0, 1};
  std::vector<float> alone_prefill(a.size() * V), alone_decode(V);
  {
    SeqSlice s{a, 0, alone_blocks, -1, true, {}};
    model_->forward(ForwardBatch{&alone_pool, nullptr, {&s, 1}}, alone_prefill.data());
    const int32_t tok[1] = {next_a};
    SeqSlice d{tok, static_cast<int64_t>(a.size()), alone_blocks, -1, false, {}};
    model_->forward(ForwardBatch{&alone_pool, nullptr, {&d, 1}}, alone_decode.data());
  }

  // Together: B, A, C with interleaved blocks.
  KvPool pool(cfg, 8);
  const std::vector<int32_t> blocks_b = {4}, blocks_a = {5, 2}, blocks_c = {0};
  std::vector<float> together(b.size() * V + a.size() * V + V);
  SeqSlice prefill[3] = {{b, 0, blocks_b, -1, true, {}}, {a, 0, blocks_a, -1, true, {}}, {c, 0, blocks_c, -1, false, {}}};
  model_->forward(ForwardBatch{&pool, nullptr, prefill}, together.data());
  EXPECT_EQ(0, std::memcmp(&together[b.size() * V], alone_prefill.data(), alone_prefill.size() * sizeof(float)))
      << "prefill logits of A depend on the batch";

  const int32_t tb[1] = {next_b}, ta[1] = {next_a}, tc[1] = {next_c};
  SeqSlice decode[3] = {{tb, static_cast<int64_t>(b.size()), blocks_b, -1, false, {}},
                        {ta, static_cast<int64_t>(a.size()), blocks_a, -1, false, {}},
                        {tc, static_cast<int64_t>(c.size()), blocks_c, -1, false, {}}};
  std::vector<float> decoded(3 * V);
  model_->forward(ForwardBatch{&pool, nullptr, decode}, decoded.data());
  EXPECT_EQ(0, std::memcmp(&decoded[V], alone_decode.data(), V * sizeof(float)))
      << "decode logits of A depend on the batch";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeGolden, ::testing::ValuesIn(moe_fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MoeGolden);

TEST(MoeGoldenFixtures, Present) { EXPECT_EQ(moe_fixtures().size(), 4u); }

// qwen2_moe_shared exercises the shared expert and its gate against transformers (the
// generic golden tests hold its logits); make sure the fixture really has them.
TEST(MoeGoldenFixtures, SharedExpertFixtureHasASharedExpert) {
  auto model = Model::load((kModels / "qwen2_moe_shared").string(), {.n_threads = 1, .load_tokenizer = false});
  EXPECT_GT(model->config().shared_expert_intermediate_size, 0);
  EXPECT_TRUE(model->checkpoint().has("model.layers.0.mlp.shared_expert_gate.weight"));
  EXPECT_TRUE(model->config().attention_bias);
}

TEST(MoeGoldenGguf, StackedExpertsMatchTheHfCheckpoint) {
  const fs::path gguf_path = kModels / "qwen3_moe_bf16_tied.gguf";
  ASSERT_TRUE(fs::exists(gguf_path));
  auto gguf = Model::load(gguf_path.string(), {.n_threads = 2, .load_tokenizer = false});
  auto hf = Model::load((kModels / "qwen3_moe_bf16_tied").string(), {.n_threads = 2, .load_tokenizer = false});
  const ModelConfig& g = gguf->config();
  const ModelConfig& h = hf->config();
  EXPECT_EQ(g.architecture, "qwen3_moe");
  EXPECT_EQ(g.num_experts, h.num_experts);
  EXPECT_EQ(g.num_experts_per_tok, h.num_experts_per_tok);
  EXPECT_EQ(g.moe_intermediate_size, h.moe_intermediate_size);
  EXPECT_EQ(g.norm_topk_prob, h.norm_topk_prob);
  const std::vector<int32_t> prompt = reference_prompt("qwen3_moe_bf16_tied");
  const size_t V = static_cast<size_t>(h.vocab_size);
  std::vector<float> from_gguf(prompt.size() * V), from_hf(prompt.size() * V);
  auto gc = gguf->new_cache(static_cast<int64_t>(prompt.size()));
  auto hc = hf->new_cache(static_cast<int64_t>(prompt.size()));
  gguf->forward(*gc, prompt, from_gguf.data(), /*all_logits=*/true);
  hf->forward(*hc, prompt, from_hf.data(), /*all_logits=*/true);
  EXPECT_EQ(0, std::memcmp(from_gguf.data(), from_hf.data(), from_hf.size() * sizeof(float)));
}

}  // namespace
}  // namespace zen
