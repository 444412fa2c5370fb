// Hybrid models (Qwen3.5 / Qwen3-Next) on the tiny fixtures of tools/make_hybrid_fixtures.py.
// golden_test.cc already checks every fixture's prompt logits, greedy tokens and a chunked
// prefill; here: the recurrent form over the whole prompt against transformers, prefill split
// at chunk multiples bit-identical to one pass, prefill-then-decode equal to full prefill,
// batch invariance, state history for speculative rollback, config parsing and loading rules.
#include "model/hybrid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/test_compare.h"
#include "io/gguf.h"
#include "io/io_test_writers.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/state_cache.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models";
// <name>.gguf: llama.cpp's qwen35 / qwen35moe / qwen3next GGUF layout (folded gains; Qwen3.5's
// value heads in tiled order; Qwen3-Next's qkvz split, ba fused) of a checkpoint the fixture
// script builds, checks against llama.cpp and removes; <name>.reference.safetensors is that
// checkpoint's transformers reference (<name>.ssm_in.gguf, Qwen3-Next with qkvz fused as older
// converters wrote it, shares it). qwen3_5_tied_q8_0.gguf (Q8_0 matrices) has its own.
const std::vector<std::string> kHybridFixtures = {
    "qwen3_5_text_f32",       "qwen3_5_vl_bf16",          "qwen3_next_f32",           "qwen3_next_moe_bf16",
    "qwen3_5_moe_bf16",       "qwen3_5_tied_f32.gguf",    "qwen3_5_tied_q8_0.gguf",   "qwen3_5_moe_tied_f32.gguf",
    "qwen3_next_tied_f32.gguf", "qwen3_next_tied_f32.ssm_in.gguf"};

struct Reference {
  std::vector<int32_t> prompt;
  std::vector<float> logits;  // [T, V]
  std::vector<int32_t> greedy;
};

template <typename T>
std::vector<T> tensor_copy(const SafetensorsFile& f, const std::string& name) {
  for (const TensorView& t : f.tensors())
    if (t.name == name) {
      std::vector<T> out(t.nbytes / sizeof(T));
      std::memcpy(out.data(), t.data, t.nbytes);
      return out;
    }
  ADD_FAILURE() << "reference lacks " << name;
  return {};
}

Reference read_reference(std::string name) {
  if (name.ends_with(".gguf")) name.resize(name.find('.'));  // a GGUF shares its source's reference
  SafetensorsFile f((kFixtures / (name + ".reference.safetensors")).string());
  return {tensor_copy<int32_t>(f, "prompt"), tensor_copy<float>(f, "logits"), tensor_copy<int32_t>(f, "greedy")};
}

std::unique_ptr<HybridModel> load_hybrid(const std::string& name) {
  std::unique_ptr<Model> m = Model::load((kFixtures / name).string(), {.n_threads = 2, .load_tokenizer = false});
  auto* hybrid = dynamic_cast<HybridModel*>(m.get());
  if (hybrid == nullptr) return nullptr;
  m.release();
  return std::unique_ptr<HybridModel>(hybrid);
}

class HybridFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ref_ = read_reference(GetParam());
    model_ = load_hybrid(GetParam());
    ASSERT_NE(model_, nullptr) << GetParam() << " did not load as a HybridModel";
    vocab_ = model_->config().vocab_size;
    ASSERT_EQ(ref_.logits.size(), ref_.prompt.size() * static_cast<size_t>(vocab_));
  }
  // All-token logits of `tokens` fed in pieces of the given sizes through one cache.
  std::vector<float> run_pieces(const std::vector<int64_t>& pieces) {
    const std::span<const int32_t> all(ref_.prompt);
    auto cache = model_->new_cache(static_cast<int64_t>(all.size()));
    std::vector<float> logits(all.size() * static_cast<size_t>(vocab_));
    size_t at = 0;
    for (int64_t piece : pieces) {
      model_->forward(*cache, all.subspan(at, static_cast<size_t>(piece)), &logits[at * static_cast<size_t>(vocab_)],
                      /*all_logits=*/true);
      at += static_cast<size_t>(piece);
    }
    EXPECT_EQ(at, all.size());
    last_state_.assign(cache->states()->slot(0), cache->states()->slot(0) + cache->states()->floats_per_slot());
    return logits;
  }
  Reference ref_;
  std::unique_ptr<HybridModel> model_;
  int64_t vocab_ = 0;
  std::vector<float> last_state_;
};

// The recurrent form over the whole 150-token prompt matches transformers (whose prefill is
// its chunked form): both delta-rule forms agree with the reference.
TEST_P(HybridFixture, RecurrentPrefillMatchesTransformers) {
  model_->set_gdn_mode(GdnMode::Recurrent);
  const std::vector<float> logits = run_pieces({static_cast<int64_t>(ref_.prompt.size())});
  const float scale = max_abs(ref_.logits);
  EXPECT_LE(max_diff(logits, ref_.logits), 1e-4f * scale);
}

// Prefill split at multiples of the chunk (64) is bit-identical to one pass: logits and state.
TEST_P(HybridFixture, SplitPrefillAtChunkMultiplesIsBitExact) {
  const auto n = static_cast<int64_t>(ref_.prompt.size());
  ASSERT_GT(n, 128);
  const std::vector<float> one = run_pieces({n});
  const std::vector<float> one_state = last_state_;
  const std::vector<float> split = run_pieces({64, 64, n - 128});
  EXPECT_EQ(one, split);
  EXPECT_EQ(one_state, last_state_);
  EXPECT_LE(max_diff(one, ref_.logits), 1e-4f * max_abs(ref_.logits));
}

// A prompt of 129 tokens split 64 + 64 + 1: the one-token piece (the decode path) is
// bit-identical to the one-pass prefill's last row and state.
TEST_P(HybridFixture, OneTokenLastPieceIsBitExact) {
  const std::span<const int32_t> prompt = std::span<const int32_t>(ref_.prompt).first(129);
  auto run = [&](const std::vector<size_t>& pieces, std::vector<float>& state) {
    auto cache = model_->new_cache(129);
    std::vector<float> logits(129 * static_cast<size_t>(vocab_));
    size_t at = 0;
    for (size_t piece : pieces) {
      model_->forward(*cache, prompt.subspan(at, piece), &logits[at * static_cast<size_t>(vocab_)], true);
      at += piece;
    }
    state.assign(cache->states()->slot(0), cache->states()->slot(0) + cache->states()->floats_per_slot());
    return logits;
  };
  std::vector<float> state_one, state_split;
  const std::vector<float> one = run({129}, state_one);
  const std::vector<float> split = run({64, 64, 1}, state_split);
  EXPECT_EQ(one, split);
  EXPECT_EQ(state_one, state_split);
}

// Prefill 100 tokens, then feed the rest one token at a time (the recurrent decode path):
// every row equals the full prefill's within f32 rounding.
TEST_P(HybridFixture, PrefillThenDecodeEqualsFullPrefill) {
  const auto n = static_cast<int64_t>(ref_.prompt.size());
  const std::vector<float> full = run_pieces({n});
  std::vector<int64_t> pieces = {100};
  for (int64_t i = 100; i < n; ++i) pieces.push_back(1);
  const std::vector<float> stepped = run_pieces(pieces);
  EXPECT_LE(max_diff(stepped, full), 1e-5f * max_abs(full));
}

// Three sequences in one batched forward (a prefill from 0, a continued prefill, a decode
// token) give exactly what each gives alone.
TEST_P(HybridFixture, BatchedForwardIsBatchInvariant) {
  const ModelConfig& cfg = model_->config();
  const std::span<const int32_t> prompt(ref_.prompt);
  const int64_t block = KvPool::kDefaultBlockSize, blocks_per_seq = 16;  // 256 tokens each
  KvPool kv(cfg, 3 * blocks_per_seq);
  StatePool states(recurrent_state_floats(cfg), 3);
  std::vector<std::vector<int32_t>> tables(3);
  for (int s = 0; s < 3; ++s)
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[static_cast<size_t>(s)].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
  ASSERT_GE(blocks_per_seq * block, static_cast<int64_t>(prompt.size()));

  auto slice = [&](int s, std::span<const int32_t> toks, int64_t pos) {
    SeqSlice x;
    x.tokens = toks;
    x.pos = pos;
    x.blocks = tables[static_cast<size_t>(s)];
    x.state_slot = s;
    x.all_logits = true;
    return x;
  };
  auto run = [&](std::vector<SeqSlice> seqs) {
    ForwardBatch batch;
    batch.kv = &kv;
    batch.states = &states;
    batch.seqs = seqs;
    std::vector<float> logits(static_cast<size_t>(logit_rows(batch) * vocab_));
    model_->forward(batch, logits.data());
    return logits;
  };
  // Setup alone: seq 1 has 70 tokens, seq 2 has 120.
  run({slice(1, prompt.first(70), 0)});
  run({slice(2, prompt.first(120), 0)});
  const std::vector<float> saved1(states.slot(1), states.slot(1) + states.floats_per_slot());
  const std::vector<float> saved2(states.slot(2), states.slot(2) + states.floats_per_slot());
  // Alone.
  const std::vector<float> a0 = run({slice(0, prompt.first(90), 0)});
  const std::vector<float> a1 = run({slice(1, prompt.subspan(70, 60), 70)});
  const std::vector<float> a2 = run({slice(2, prompt.subspan(120, 1), 120)});
  // Together, from the same states (KV rows are rewritten with the same values).
  std::copy(saved1.begin(), saved1.end(), states.slot(1));
  std::copy(saved2.begin(), saved2.end(), states.slot(2));
  const std::vector<float> all =
      run({slice(0, prompt.first(90), 0), slice(1, prompt.subspan(70, 60), 70), slice(2, prompt.subspan(120, 1), 120)});
  std::vector<float> expected = a0;
  expected.insert(expected.end(), a1.begin(), a1.end());
  expected.insert(expected.end(), a2.begin(), a2.end());
  EXPECT_EQ(all, expected);
}

// Speculative rollback: with state_history, the state after token i lands in its own slot and
// equals the state of decoding those tokens one by one.
TEST_P(HybridFixture, StateHistoryRecordsEveryToken) {
  const ModelConfig& cfg = model_->config();
  const std::span<const int32_t> prompt(ref_.prompt);
  KvPool kv(cfg, 16);
  StatePool states(recurrent_state_floats(cfg), 8);  // 0: verify seq, 1: stepwise seq, 2..6: history
  std::vector<int32_t> table;
  for (int32_t b = 0; b < 8; ++b) table.push_back(b);
  std::vector<int32_t> table2;
  for (int32_t b = 8; b < 16; ++b) table2.push_back(b);
  auto run = [&](int32_t slot, std::span<const int32_t> blocks, std::span<const int32_t> toks, int64_t pos,
                 std::span<const int32_t> history) {
    SeqSlice x;
    x.tokens = toks;
    x.pos = pos;
    x.blocks = blocks;
    x.state_slot = slot;
    x.all_logits = true;
    x.state_history = history;
    ForwardBatch batch;
    batch.kv = &kv;
    batch.states = &states;
    batch.seqs = std::span<const SeqSlice>(&x, 1);
    std::vector<float> logits(toks.size() * static_cast<size_t>(vocab_));
    model_->forward(batch, logits.data());
    return logits;
  };
  run(0, table, prompt.first(40), 0, {});
  run(1, table2, prompt.first(40), 0, {});
  const std::vector<int32_t> history = {2, 3, 4, 5, 6};
  const std::vector<float> verify = run(0, table, prompt.subspan(40, 5), 40, history);
  for (int64_t i = 0; i < 5; ++i) {
    const std::vector<float> step = run(1, table2, prompt.subspan(static_cast<size_t>(40 + i), 1), 40 + i, {});
    const float* row = &verify[static_cast<size_t>(i * vocab_)];
    EXPECT_TRUE(std::equal(step.begin(), step.end(), row)) << "logits of token " << i;
    EXPECT_TRUE(std::equal(states.slot(1), states.slot(1) + states.floats_per_slot(), states.slot(history[static_cast<size_t>(i)])))
        << "state after token " << i;
  }
}

std::string fixture_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}
INSTANTIATE_TEST_SUITE_P(Fixtures, HybridFixture, ::testing::ValuesIn(kHybridFixtures), fixture_name);

TEST(HybridConfig, ParsesCompositeQwen35) {
  const ModelConfig cfg = Model::load((kFixtures / "qwen3_5_vl_bf16").string(), {.load_tokenizer = false})->config();
  EXPECT_EQ(cfg.architecture, "qwen3_5");
  EXPECT_EQ(cfg.text_prefix, "model.language_model.");
  EXPECT_TRUE(cfg.tie_word_embeddings);
  EXPECT_EQ(cfg.layer_types, (std::vector<std::string>{"full_attention", "linear_attention", "linear_attention",
                                                        "full_attention"}));
  EXPECT_EQ(cfg.kv_layer_index(3), 1);
  EXPECT_EQ(cfg.rotary_dim(), cfg.head_dim / 4);
  EXPECT_FALSE(cfg.linear_fused_projections);
}

TEST(HybridConfig, LayerScheduleFromInterval) {
  nlohmann::json j = {{"model_type", "qwen3_next"}, {"vocab_size", 64}, {"hidden_size", 32},
                      {"intermediate_size", 64}, {"num_hidden_layers", 8}, {"num_attention_heads", 2},
                      {"num_key_value_heads", 1}, {"head_dim", 16}, {"full_attention_interval", 4}};
  const ModelConfig cfg = ModelConfig::from_hf(j);
  EXPECT_TRUE(cfg.linear_fused_projections);
  EXPECT_EQ(cfg.num_kv_layers(), 2);
  EXPECT_TRUE(cfg.is_full_attention(3));
  EXPECT_TRUE(cfg.is_full_attention(7));
  EXPECT_FALSE(cfg.is_full_attention(0));
  EXPECT_DOUBLE_EQ(cfg.partial_rotary_factor, 0.25);  // HF's default for the hybrids
  // Per linear layer: conv window [K-1, 2*Hk*Dk + Hv*Dv] and delta state [Hv, Dk, Dv].
  const int64_t conv = 3 * (2 * 16 * 128 + 32 * 128), delta = 32 * 128 * 128;
  EXPECT_EQ(recurrent_state_floats(cfg), 6 * (conv + delta));
  EXPECT_EQ(GdnShape::from_config(cfg).state_floats(), conv + delta);
}

TEST(HybridConfig, RejectsInconsistentValues) {
  nlohmann::json j = {{"model_type", "qwen3_5_text"}, {"vocab_size", 64}, {"hidden_size", 32},
                      {"intermediate_size", 64}, {"num_hidden_layers", 4}, {"num_attention_heads", 2},
                      {"num_key_value_heads", 1}, {"head_dim", 16}};
  nlohmann::json bad = j;
  bad["layer_types"] = {"linear_attention", "full_attention"};
  EXPECT_THROW(ModelConfig::from_hf(bad), Error);
  bad = j;
  bad["layer_types"] = {"linear_attention", "sliding_attention", "linear_attention", "full_attention"};
  EXPECT_THROW(ModelConfig::from_hf(bad), Error);
  bad = j;
  bad["linear_num_key_heads"] = 3;
  bad["linear_num_value_heads"] = 4;
  EXPECT_THROW(ModelConfig::from_hf(bad), Error);
  bad = j;
  bad["full_attention_interval"] = 0;
  EXPECT_THROW(ModelConfig::from_hf(bad), Error);
  bad = j;
  bad["attn_output_gate"] = false;
  EXPECT_THROW(ModelConfig::from_hf(bad), Error);
}

// llama.cpp's qwen35 / qwen35moe metadata: read as the fixtures' writer sets it, and every
// missing or inconsistent value named.
std::string gguf_config_error(const std::function<void(testing_io::GgufBuilder&)>& edit,
                              const std::string& arch = "qwen35") {
  testing_io::GgufBuilder b;
  b.add_string("general.architecture", arch);
  const std::vector<std::pair<std::string, uint32_t>> ints = {
      {"embedding_length", 64}, {"block_count", 4},  {"feed_forward_length", 64}, {"attention.head_count", 4},
      {"attention.head_count_kv", 2}, {"attention.key_length", 16}, {"attention.value_length", 16},
      {"rope.dimension_count", 4}, {"ssm.conv_kernel", 4}, {"ssm.state_size", 16}, {"ssm.group_count", 2},
      {"ssm.time_step_rank", 4}, {"ssm.inner_size", 64}, {"expert_count", 4}, {"expert_used_count", 2},
      {"expert_feed_forward_length", 32}};
  edit(b);
  for (const auto& [key, value] : ints)
    if (b.kv.find(arch + "." + key) == std::string::npos) b.add_u32(arch + "." + key, value);
  b.add_strings("tokenizer.ggml.tokens", std::vector<std::string>(64, "t"));
  const std::string path = testing_io::temp_path("hybrid_meta.gguf");
  testing_io::write_file(path, b.build());
  try {
    const ModelConfig c = ModelConfig::from_gguf(GgufFile(path));
    EXPECT_EQ(c.linear_value_head_dim, 16);
    EXPECT_TRUE(c.gguf_hybrid_layout);
    EXPECT_EQ(c.layer_types, (std::vector<std::string>{"linear_attention", "linear_attention", "linear_attention",
                                                        "full_attention"}));
    EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HybridConfig, GgufMetadataIsReadAndCheckedByName) {
  EXPECT_EQ(gguf_config_error([](auto&) {}), "");
  EXPECT_EQ(gguf_config_error([](auto&) {}, "qwen35moe"), "");
  EXPECT_NE(gguf_config_error([](auto& b) { b.add_u32("qwen35.ssm.group_count", 0); }), "");
  const std::string inner = gguf_config_error([](auto& b) { b.add_u32("qwen35.ssm.inner_size", 66); });
  EXPECT_NE(inner.find("qwen35.ssm.inner_size 66 is not a multiple of ssm.time_step_rank 4"), std::string::npos) << inner;
  const std::string rot = gguf_config_error([](auto& b) { b.add_u32("qwen35.rope.dimension_count", 17); });
  EXPECT_NE(rot.find("rope.dimension_count 17"), std::string::npos) << rot;
  const std::string scale = gguf_config_error([](auto& b) { b.add_f32("qwen35moe.expert_weights_scale", 2.0f); },
                                              "qwen35moe");
  EXPECT_NE(scale.find("expert_weights_scale 2 is not supported"), std::string::npos) << scale;
  const std::string explicit_schedule =
      gguf_config_error([](auto& b) { b.add_i32s("qwen35.attention.recurrent_layers", {1, 1, 1, 0}); });
  EXPECT_NE(explicit_schedule.find("recurrent_layers"), std::string::npos) << explicit_schedule;
}

// A lying layer count is refused before the layer schedule is built from it (found by
// fuzz/gguf.cc): 2^32 - 16 blocks pushed billions of layer types, gigabytes, before
// validate() saw the count, and a nextn_predict_layers of INT64_MIN overflowed
// block_count - nextn_predict_layers. config.json's num_hidden_layers went the same way.
TEST(HybridConfig, AbsurdLayerCountsAreRefusedBeforeUse) {
  const std::string blocks = gguf_config_error([](auto& b) { b.add_u32("qwen35.block_count", 0xFFFFFFF0u); });
  EXPECT_NE(blocks.find("qwen35.block_count 4294967280 is implausible"), std::string::npos) << blocks;
  const std::string nextn = gguf_config_error([](auto& b) {
    b.key("qwen35.nextn_predict_layers", testing_io::kI64);
    testing_io::put_le(b.kv, std::numeric_limits<int64_t>::min());
  });
  EXPECT_NE(nextn.find("qwen35.nextn_predict_layers -9223372036854775808 is implausible"), std::string::npos)
      << nextn;
  const nlohmann::json j = {{"model_type", "qwen3_5_text"}, {"vocab_size", 64}, {"hidden_size", 32},
                            {"intermediate_size", 64}, {"num_hidden_layers", int64_t{1} << 40},
                            {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 16}};
  try {
    ModelConfig::from_hf(j);
    ADD_FAILURE() << "2^40 layers accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_hidden_layers 1099511627776 is implausible"), std::string::npos)
        << e.what();
  }
}

// The vision tower of a composite checkpoint is ignored by a named rule, not silently.
TEST(HybridLoading, VisionTowerIgnoredByNamedRule) {
  auto model = Model::load((kFixtures / "qwen3_5_vl_bf16").string(), {.load_tokenizer = false});
  const LoadVerdict v = model->checkpoint().verdict();
  EXPECT_TRUE(v.ok()) << v.to_string();
  int visual = 0;
  for (const std::string& line : v.ignored)
    if (line.starts_with("model.visual.")) {
      ++visual;
      EXPECT_NE(line.find("vision tower"), std::string::npos) << line;
    }
  EXPECT_GT(visual, 0);
}

TEST(HybridLoading, ForwardWithoutStatePoolFails) {
  auto model = load_hybrid("qwen3_5_text_f32");
  ASSERT_NE(model, nullptr);
  KvPool kv(model->config(), 4);
  const std::vector<int32_t> tokens = {3, 4};
  const std::vector<int32_t> blocks = {0};
  SeqSlice s;
  s.tokens = tokens;
  s.blocks = blocks;
  s.state_slot = 0;
  ForwardBatch batch;
  batch.kv = &kv;
  batch.seqs = std::span<const SeqSlice>(&s, 1);
  std::vector<float> logits(static_cast<size_t>(model->config().vocab_size));
  EXPECT_THROW(model->forward(batch, logits.data()), Error);
}

// A state-history slot that another sequence (or an earlier token) also writes is refused.
TEST(HybridLoading, StateHistorySlotConflictsAreErrors) {
  auto model = load_hybrid("qwen3_5_text_f32");
  ASSERT_NE(model, nullptr);
  KvPool kv(model->config(), 4);
  StatePool states(recurrent_state_floats(model->config()), 4);
  const std::vector<int32_t> tokens = {3, 4}, one = {5}, blocks0 = {0}, blocks1 = {1};
  auto run = [&](std::vector<int32_t> history0) {
    SeqSlice a, b;
    a.tokens = tokens;
    a.blocks = blocks0;
    a.state_slot = 0;
    a.state_history = history0;
    b.tokens = one;
    b.blocks = blocks1;
    b.state_slot = 1;
    const std::vector<SeqSlice> seqs = {a, b};
    ForwardBatch batch;
    batch.kv = &kv;
    batch.states = &states;
    batch.seqs = seqs;
    std::vector<float> logits(static_cast<size_t>(2 * model->config().vocab_size));
    model->forward(batch, logits.data());
  };
  EXPECT_NO_THROW(run({2, 3}));
  EXPECT_NO_THROW(run({2, 0}));            // own slot for the last token: fine
  EXPECT_THROW(run({1, 2}), Error);        // another sequence's state
  EXPECT_THROW(run({0, 2}), Error);        // own slot before the last token
  EXPECT_THROW(run({2, 2}), Error);        // one slot for two tokens
  EXPECT_THROW(run({2, 9}), Error);        // outside the pool
}

}  // namespace
}  // namespace zen

namespace zen {
namespace {

// The MTP head against the script's reference built from transformers' modules: over the
// whole prompt, then in two pieces through its own KV. The GGUF carries it as llama.cpp's
// nextn block (blk.4).
class HybridMtpLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridMtpLogits, MatchReference) {
  auto model = load_hybrid(GetParam());
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->mtp_available()) << model->mtp_status();
  std::string source = GetParam();
  if (source.ends_with(".gguf")) source.resize(source.size() - 5);
  SafetensorsFile f((kFixtures / (source + ".reference.safetensors")).string());
  const std::vector<int32_t> prompt = tensor_copy<int32_t>(f, "prompt");
  const std::vector<float> expected = tensor_copy<float>(f, "mtp_logits");
  const int64_t V = model->config().vocab_size, H = model->config().hidden_size;
  const auto T = static_cast<int64_t>(prompt.size());
  ASSERT_EQ(static_cast<int64_t>(expected.size()), (T - 1) * V);

  auto cache = model->new_cache(T);
  std::vector<float> logits(static_cast<size_t>(T * V));
  model->forward(*cache, prompt, logits.data(), /*all_logits=*/true);
  const std::vector<float> hidden(model->final_hidden().begin(), model->final_hidden().end());
  ASSERT_EQ(static_cast<int64_t>(hidden.size()), T * H);

  const std::span<const int32_t> next = std::span<const int32_t>(prompt).subspan(1);
  KvPool kv(model->mtp_kv_config(), 16);
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b < 16; ++b) blocks.push_back(b);
  auto run = [&](int64_t begin, int64_t count, float* out) {
    SeqSlice s;
    s.tokens = next.subspan(static_cast<size_t>(begin), static_cast<size_t>(count));
    s.pos = begin;
    s.blocks = blocks;
    s.all_logits = true;
    ForwardBatch batch;
    batch.kv = &kv;
    batch.seqs = std::span<const SeqSlice>(&s, 1);
    model->mtp_forward(batch, &hidden[static_cast<size_t>(begin * H)], out);
  };
  std::vector<float> mtp(static_cast<size_t>((T - 1) * V));
  run(0, T - 1, mtp.data());
  const float scale = max_abs(expected);
  EXPECT_LE(max_diff(mtp, expected), 1e-4f * scale);
  std::vector<float> pieces(mtp.size());
  run(0, 100, pieces.data());
  run(100, T - 1 - 100, &pieces[static_cast<size_t>(100 * V)]);
  EXPECT_LE(max_diff(pieces, mtp), 1e-5f * scale);
}
INSTANTIATE_TEST_SUITE_P(Fixtures, HybridMtpLogits,
                         ::testing::Values("qwen3_5_text_f32", "qwen3_5_tied_f32.gguf"), fixture_name);

TEST(HybridMtp, GgufWithoutNextnHasNoHead) {
  auto model = load_hybrid("qwen3_5_tied_q8_0.gguf");
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(model->mtp_available());
  EXPECT_EQ(model->mtp_status(), "absent (no nextn layers)");
}

TEST(HybridMtp, AbsentHeadIsAnErrorWhenAskedFor) {
  auto model = load_hybrid("qwen3_next_f32");
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(model->mtp_available());
  EXPECT_EQ(model->mtp_status(), "absent (no mtp.* tensors)");
  KvPool kv(model->mtp_kv_config(), 1);
  const std::vector<int32_t> tokens = {3}, blocks = {0};
  SeqSlice s;
  s.tokens = tokens;
  s.blocks = blocks;
  ForwardBatch batch;
  batch.kv = &kv;
  batch.seqs = std::span<const SeqSlice>(&s, 1);
  std::vector<float> hidden(static_cast<size_t>(model->config().hidden_size)), logits(static_cast<size_t>(model->config().vocab_size));
  try {
    model->mtp_forward(batch, hidden.data(), logits.data());
    ADD_FAILURE() << "mtp_forward ran without an MTP head";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no mtp.* tensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zen
