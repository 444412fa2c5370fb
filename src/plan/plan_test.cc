// zen plan's layout and cost model: exact collective counts and bytes on a hand-checkable tiny
// MoE config (TP=2, TP=4 with replicated KV heads, PP=2, EP=2 both ways), parameter categories
// against count_parameters on every fixture config, the zen4-ultra-shaped MoE (about 1.04T
// parameters: what fits where) and the Zen6-shaped hybrid (Gated DeltaNet split by heads), and
// bad inputs.
#include "plan/plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "base/error.h"
#include "base/mmap.h"
#include "model/footprint.h"
#include "model/gated_delta_net.h"

namespace zen::plan {
namespace {

namespace fs = std::filesystem;
const fs::path kConfigs = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/configs";
constexpr double kGiB = 1024.0 * 1024 * 1024;

ModelConfig load(const fs::path& path) {
  return ModelConfig::from_hf(nlohmann::json::parse(read_text_file(path.string())));
}

// 2 layers, H = 8, 4 query heads / 2 KV heads of dim 4, vocab 16; layer 0 dense (I = 12),
// layer 1 sparse (4 experts of I = 6, top-2).
nlohmann::json tiny_json() {
  return {{"model_type", "qwen3_moe"}, {"vocab_size", 16},        {"hidden_size", 8},
          {"intermediate_size", 12},   {"num_hidden_layers", 2},  {"num_attention_heads", 4},
          {"num_key_value_heads", 2},  {"head_dim", 4},           {"num_experts", 4},
          {"num_experts_per_tok", 2},  {"moe_intermediate_size", 6}, {"decoder_sparse_step", 2}};
}
ModelConfig tiny() { return ModelConfig::from_hf(tiny_json()); }

Options options(int64_t nodes) {
  Options o;
  o.nodes = nodes;
  o.memory_per_node = 1 << 20;
  o.network_gbps = 100;
  o.latency_us = 20;
  o.min_kv_tokens = 16;
  return o;
}

// Calls of `kind` per step and the payload of each (all equal).
int64_t calls_of(const std::vector<CollectiveCall>& calls, CollectiveKind kind) {
  int64_t n = 0;
  for (const CollectiveCall& c : calls) n += c.kind == kind ? c.calls : 0;
  return n;
}

const double kAlpha = 20e-6, kBeta = 100e9 / 8;

TEST(Plan, TinyParameterCategoriesSumToCountParameters) {
  const ModelConfig c = tiny();
  const ParameterBreakdown b = parameter_breakdown(c);
  const ParameterCount p = count_parameters(c);
  EXPECT_EQ(b.total(), p.total);
  EXPECT_EQ(b.active(), p.active);
  // By hand: embedding + lm_head 2 * 16 * 8; norms 8 + 2 * 16; attention 2 * (128 + 2 * 64 + 128 + 8);
  // dense MLP 3 * 8 * 12; router 4 * 8; experts 4 * 3 * 8 * 6.
  EXPECT_EQ(p.total, 256 + 40 + 784 + 288 + 32 + 576);
  EXPECT_EQ(b.vectors(), 40 + 2 * 8);  // norms and the q/k norms
}

TEST(Plan, CategoriesSumToCountParametersOnEveryFixtureConfig) {
  std::vector<fs::path> configs = {kConfigs / "zen6_shaped/config.json", kConfigs / "zen4_ultra_shaped/config.json"};
  for (const auto& e : fs::directory_iterator(fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models"))
    if (e.is_directory() && fs::exists(e.path() / "config.json")) configs.push_back(e.path() / "config.json");
  int checked = 0;
  for (const fs::path& path : configs) {
    ModelConfig c;
    try {
      c = load(path);
    } catch (const Error&) {
      continue;
    }
    const ParameterBreakdown b = parameter_breakdown(c);
    const ParameterCount p = count_parameters(c);
    EXPECT_EQ(b.total(), p.total) << path;
    EXPECT_EQ(b.active(), p.active) << path;
    // One rank holds everything: its stored parameters are the model's.
    const LayoutPlan one = plan_layout(c, [] {
      Options o = options(1);
      o.memory_per_node = 1e15;
      return o;
    }(), Layout{});
    EXPECT_EQ(one.stages[0].parameters, p.total) << path;
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

TEST(Plan, TinyTensorParallelTwo) {
  const ModelConfig c = tiny();
  const Options o = options(2);
  const LayoutPlan p = plan_layout(c, o, {2, 1, 1});
  ASSERT_TRUE(p.valid);
  EXPECT_EQ(p.kv_heads_per_rank, 1);
  EXPECT_EQ(p.kv_replication, 1);
  // All-reduces: embedding 1 + attention 2 layers + dense MLP 1 + MoE 1 = 2 x layers + 1;
  // one all-gather of (max, index) for the argmax.
  EXPECT_EQ(calls_of(p.collectives, CollectiveKind::AllReduce), 2 * 2 + 1);
  EXPECT_EQ(calls_of(p.collectives, CollectiveKind::AllGather), 1);
  EXPECT_EQ(p.calls_per_token, 6);
  for (const CollectiveCall& call : p.collectives) {
    EXPECT_EQ(call.group, 2);
    if (call.kind == CollectiveKind::AllReduce) {
      EXPECT_EQ(call.payload_bytes, 8 * 2);  // [1, H] bf16
      EXPECT_EQ(call.wire_bytes, 16);        // 2 (n-1)/n B
      EXPECT_DOUBLE_EQ(call.seconds, 2 * (kAlpha + 8 / kBeta));
    } else {
      EXPECT_EQ(call.payload_bytes, 8);  // f32 max + i32 index
      EXPECT_EQ(call.wire_bytes, 8);
      EXPECT_DOUBLE_EQ(call.seconds, kAlpha + 8 / kBeta);
    }
  }
  EXPECT_DOUBLE_EQ(p.wire_bytes_per_token, 5 * 16 + 8);
  EXPECT_DOUBLE_EQ(p.network_seconds, 5 * 2 * (kAlpha + 8 / kBeta) + kAlpha + 8 / kBeta);
  // Rows that sample: each rank's 8 of the 16 logits, f32.
  Options sampled = options(2);
  sampled.greedy = false;
  for (const CollectiveCall& call : step_collectives(c, {2, 1, 1}, sampled, 1))
    if (call.kind == CollectiveKind::AllGather) {
      EXPECT_EQ(call.payload_bytes, 8 * 4);
    }
  // Per rank: vocab halves 2 * 8 * 8, norms 40, attention 2 * (192 + 8), dense 3 * 8 * 6,
  // router 32, experts 4 * 3 * 8 * 3. The two ranks hold the model plus the replicated parts.
  const int64_t per_rank = 128 + 40 + 400 + 144 + 32 + 288;
  EXPECT_EQ(p.stages[0].parameters, per_rank);
  EXPECT_EQ(2 * per_rank, count_parameters(c).total + 40 + 2 * 8 + 32);
  // bf16 matrices, f32 vectors (norms 40, q/k norms 16).
  EXPECT_DOUBLE_EQ(p.weight_bytes, (per_rank - 56) * 2.0 + 56 * 4.0);
  // KV: 2 layers x 1 head x 4 x (K, V) x bf16.
  EXPECT_EQ(p.kv_bytes_per_token, 2 * 1 * 4 * 2 * 2);
  EXPECT_EQ(2 * p.kv_bytes_per_token, static_cast<int64_t>(KvPool::bytes_per_token(c, KvDType::BF16)));
  // Reads per token: the embedding's one row instead of its 64 parameters; experts k = 2 of 4.
  const double read = (per_rank - 64 + 8 - 2 * 72 - 56) * 2.0 + 56 * 4.0;
  EXPECT_DOUBLE_EQ(p.stages[0].read_bytes, read);
  EXPECT_DOUBLE_EQ(p.memory_seconds, read / 200e9);
  EXPECT_DOUBLE_EQ(p.tokens_per_second, 1 / (p.memory_seconds + p.network_seconds));
  EXPECT_EQ(p.kv_tokens, static_cast<int64_t>(((1 << 20) * 0.9 - p.weight_bytes) / 32));
  EXPECT_TRUE(p.fits);

  // A batch of 3 tokens: the same calls, 3x the payload.
  for (const CollectiveCall& call : step_collectives(c, {2, 1, 1}, o, 3))
    EXPECT_EQ(call.payload_bytes, call.kind == CollectiveKind::AllReduce ? 3 * 16 : 3 * 8);
}

TEST(Plan, TinyTensorParallelFourReplicatesKvHeads) {
  const ModelConfig c = tiny();
  const LayoutPlan p = plan_layout(c, options(4), {4, 1, 1});
  EXPECT_EQ(p.kv_heads_per_rank, 1);  // 2 KV heads over 4 ranks
  EXPECT_EQ(p.kv_replication, 2);
  EXPECT_EQ(p.kv_bytes_per_token, 2 * 1 * 4 * 2 * 2);
  bool said = false, padded = false;
  for (const std::string& n : p.notes) {
    said = said || n.find("KV heads replicated") != std::string::npos;
    padded = padded || n.find("moe_intermediate_size padded to 2") != std::string::npos;
  }
  EXPECT_TRUE(said);
  EXPECT_TRUE(padded);  // 6 / 4 -> 2 rows per rank
  EXPECT_EQ(calls_of(p.collectives, CollectiveKind::AllReduce), 5);
  for (const CollectiveCall& call : p.collectives)
    if (call.kind == CollectiveKind::AllReduce) {
      EXPECT_EQ(call.wire_bytes, 2.0 * 3 / 4 * 16);
      EXPECT_DOUBLE_EQ(call.seconds, 6 * (kAlpha + 4 / kBeta));  // 2(n-1) steps of B/n
    }
}

TEST(Plan, TinyPipelineTwo) {
  const ModelConfig c = tiny();
  const LayoutPlan p = plan_layout(c, options(2), {1, 1, 2});
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_EQ(p.stages[0].first_layer, 0);
  EXPECT_EQ(p.stages[0].layers, 1);
  EXPECT_EQ(p.stages[1].first_layer, 1);
  EXPECT_TRUE(p.stages[0].embedding && !p.stages[0].lm_head);
  EXPECT_TRUE(p.stages[1].lm_head && !p.stages[1].embedding);
  // One activation send at the boundary, the argmax (max, index) back: nothing else.
  ASSERT_EQ(p.collectives.size(), 2u);
  EXPECT_EQ(p.collectives[0].kind, CollectiveKind::Send);
  EXPECT_EQ(p.collectives[0].payload_bytes, 16);
  EXPECT_EQ(p.collectives[0].stage, 0);
  EXPECT_DOUBLE_EQ(p.collectives[0].seconds, kAlpha + 16 / kBeta);
  EXPECT_EQ(p.collectives[1].payload_bytes, 8);
  EXPECT_EQ(p.calls_per_token, 2);
  // Stage 0: embedding 128, its norms 16, attention 392, dense MLP 288; stage 1: lm_head 128,
  // norms 16 + final 8, attention 392, router 32, experts 576.
  EXPECT_EQ(p.stages[0].parameters, 128 + 16 + 392 + 288);
  EXPECT_EQ(p.stages[1].parameters, 128 + 24 + 392 + 32 + 576);
  EXPECT_EQ(p.stages[0].parameters + p.stages[1].parameters, count_parameters(c).total);
  // Latencies add at batch 1.
  EXPECT_DOUBLE_EQ(p.memory_seconds, p.stages[0].memory_seconds + p.stages[1].memory_seconds);
  EXPECT_NEAR(p.pipelined_tokens_per_second,
              1 / std::max(p.stages[0].memory_seconds + p.stages[0].network_seconds,
                           p.stages[1].memory_seconds + p.stages[1].network_seconds),
              1e-6);
  EXPECT_EQ(p.kv_bytes_per_token, 1 * 2 * 4 * 2 * 2);  // one KV layer per stage, both heads
}

TEST(Plan, TinyExpertParallelTwo) {
  const ModelConfig c = tiny();
  const Options o = options(2);
  const Layout L{1, 2, 1};
  EXPECT_EQ(layout_problem(c, L), "");
  // (b) all-reduce: one of [1, H] per MoE layer.
  const auto ar = step_collectives(c, L, o, 1, MoeComm::AllReduce);
  ASSERT_EQ(ar.size(), 1u);
  EXPECT_EQ(ar[0].kind, CollectiveKind::AllReduce);
  EXPECT_EQ(ar[0].calls, 1);
  EXPECT_EQ(ar[0].payload_bytes, 16);
  // (a) all-to-all: dispatch + combine of k (e-1)/e = 1 row each.
  const auto a2a = step_collectives(c, L, o, 1, MoeComm::AllToAll);
  ASSERT_EQ(a2a.size(), 2u);
  for (const CollectiveCall& call : a2a) {
    EXPECT_EQ(call.kind, CollectiveKind::AllToAll);
    EXPECT_EQ(call.payload_bytes, 16);
    EXPECT_DOUBLE_EQ(call.seconds, kAlpha + 16 / kBeta);
  }
  // 4 tokens, 2 per rank: each sends 2 x 2 x 1/2 rows.
  for (const CollectiveCall& call : step_collectives(c, L, o, 4, MoeComm::AllToAll)) EXPECT_EQ(call.payload_bytes, 32);

  const LayoutPlan p = plan_layout(c, o, L);
  EXPECT_EQ(p.moe, MoeComm::AllReduce);  // k = 2 > 1: fewer bytes, same 2(e-1) latency steps
  EXPECT_EQ(p.calls_per_token, 1);
  EXPECT_EQ(p.collectives_alt.size(), 2u);
  EXPECT_LT(p.ep.all_reduce_batch1, p.ep.all_to_all_batch1);
  EXPECT_EQ(p.kv_heads_per_rank, 2);  // attention replicated
  // Stored: everything but the experts (1976 - 576) and 2 of the 4 experts (144 each).
  EXPECT_EQ(p.stages[0].parameters, 1400 + 2 * 144);
  // Read: non-expert parameters with one embedding row (1400 - 128 + 8, 56 of them f32), plus the
  // expected k/e = 1 expert; worst case both.
  EXPECT_DOUBLE_EQ(p.stages[0].read_bytes, (1280 - 56 + 144) * 2.0 + 56 * 4.0);
  EXPECT_DOUBLE_EQ(p.stages[0].read_bytes_worst, (1280 - 56 + 288) * 2.0 + 56 * 4.0);
  EXPECT_GT(p.memory_seconds_worst, p.memory_seconds);
}

TEST(Plan, AllToAllWinsAtLargeBatchWhenTopKBelowExperts) {
  nlohmann::json j = tiny_json();
  j["num_experts_per_tok"] = 1;
  const ModelConfig c = ModelConfig::from_hf(j);
  Options o = options(4);
  o.large_batch = 64;
  const LayoutPlan p = plan_layout(c, o, {1, 4, 1});
  // Batch 1: equal latency steps and equal bytes (k = 1): the all-reduce is kept.
  EXPECT_NEAR(p.ep.all_to_all_batch1, p.ep.all_reduce_batch1, 1e-12);
  EXPECT_EQ(p.moe, MoeComm::AllReduce);
  // Batch 64: all-to-all sends 16 x 1 x 3/4 rows per rank per direction, the all-reduce 2 x 3/4 x 64.
  EXPECT_LT(p.ep.all_to_all_large, p.ep.all_reduce_large);
  EXPECT_DOUBLE_EQ(p.ep.all_to_all_large, 2 * (3 * kAlpha + 12 * 16 / kBeta));
  EXPECT_DOUBLE_EQ(p.ep.all_reduce_large, 6 * (kAlpha + 64 * 16 / 4 / kBeta));
}

TEST(Plan, LayoutsAndParsing) {
  EXPECT_EQ(parse_layout("tp=8"), (Layout{8, 1, 1}));
  EXPECT_EQ(parse_layout("pp=2,tp=4"), (Layout{4, 1, 2}));
  EXPECT_EQ(parse_layout("ep=8"), (Layout{1, 8, 1}));
  EXPECT_EQ((Layout{4, 1, 2}).name(), "tp=4,pp=2");
  EXPECT_EQ((Layout{1, 1, 1}).name(), "tp=1");
  for (const char* bad : {"", "tp", "tp=", "tp=0", "tp=-2", "tp=2,tp=2", "dp=2", "tp=2,", "tp=x", "tp=99999999999"})
    EXPECT_THROW(parse_layout(bad), Error) << bad;
  const ModelConfig c = tiny();
  // 4 = 4x1, 2x2, 1x4 for TP and (MoE) EP x PP.
  EXPECT_EQ(candidate_layouts(c, 4).size(), 5u);
  EXPECT_NE(layout_problem(c, {3, 1, 1}), "");   // 4 heads over 3
  EXPECT_NE(layout_problem(c, {1, 3, 1}), "");   // 4 experts over 3
  EXPECT_NE(layout_problem(c, {1, 1, 3}), "");   // 3 stages for 2 layers
  EXPECT_NE(layout_problem(c, {2, 2, 1}), "");   // tp with ep
  nlohmann::json dense = tiny_json();
  dense.erase("num_experts");
  EXPECT_NE(layout_problem(ModelConfig::from_hf(dense), {1, 2, 1}), "");
  EXPECT_EQ(candidate_layouts(ModelConfig::from_hf(dense), 4).size(), 3u);
}

TEST(Plan, BadInputs) {
  const ModelConfig c = tiny();
  EXPECT_THROW(plan_all(c, options(0)), Error);
  EXPECT_THROW(candidate_layouts(c, 0), Error);
  Options o = options(2);
  o.memory_per_node = 1024;  // smaller than any rank's weights
  try {
    plan_all(c, o);
    FAIL() << "expected nothing to fit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing fits"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_layout(c, options(2), {4, 1, 1}), Error);  // 4 ranks on 2 nodes
  EXPECT_THROW(plan_layout(c, options(3), {3, 1, 1}), Error);  // heads do not split
  EXPECT_THROW(dtype_bytes("int3"), Error);
  for (auto mutate : std::vector<void (*)(Options&)>{
           [](Options& x) { x.network_gbps = 0; }, [](Options& x) { x.memory_per_node = -1; },
           [](Options& x) { x.reserve = 1; }, [](Options& x) { x.latency_us = NAN; },
           [](Options& x) { x.memory_bandwidth_gbs = 0; }, [](Options& x) { x.dtype = "fp4"; },
           [](Options& x) { x.min_kv_tokens = -1; }, [](Options& x) { x.large_batch = 0; }}) {
    Options bad = options(2);
    mutate(bad);
    EXPECT_THROW(plan_all(c, bad), Error);
  }
  // A layout that holds its weights but not min_kv_tokens of KV does not fit.
  Options tight = options(1);
  const LayoutPlan roomy = plan_layout(c, tight, Layout{});
  tight.memory_per_node = (roomy.weight_bytes + 10 * 64) / 0.9;
  const LayoutPlan p = plan_layout(c, tight, Layout{});
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.fit_problem.find("KV room"), std::string::npos) << p.fit_problem;
}

TEST(Plan, Zen4UltraShaped) {
  const ModelConfig c = load(kConfigs / "zen4_ultra_shaped/config.json");
  EXPECT_EQ(c.num_layers, 96);
  int64_t sparse = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) sparse += c.is_sparse_layer(l);
  EXPECT_EQ(sparse, 48);
  const ParameterCount n = count_parameters(c);
  EXPECT_NEAR(static_cast<double>(n.total), 1.04e12, 0.02 * 1.04e12);
  EXPECT_EQ(parameter_breakdown(c).total(), n.total);

  Options o;
  o.nodes = 8;
  o.memory_per_node = 256 * kGiB;
  o.network_gbps = 100;
  o.dtype = "nvfp4";
  const std::vector<LayoutPlan> plans = plan_all(c, o);
  EXPECT_EQ(plans.size(), 7u);  // tp / ep x pp for pp = 1, 2, 4 and pp = 8
  for (size_t i = 1; i < plans.size(); ++i)
    if (plans[i].fits == plans[i - 1].fits) {
      EXPECT_LE(plans[i].tokens_per_second, plans[i - 1].tokens_per_second);
    }
  const LayoutPlan tp8 = plan_layout(c, o, {8, 1, 1});
  EXPECT_TRUE(tp8.fits);
  // About an eighth of the model at 4.5 bits (replicated norms, router and q/k norms are small).
  EXPECT_NEAR(tp8.weight_bytes, static_cast<double>(n.total) / 8 * 0.5625, 0.01 * tp8.weight_bytes);
  EXPECT_EQ(calls_of(tp8.collectives, CollectiveKind::AllReduce), 2 * 96 + 1);
  EXPECT_EQ(calls_of(tp8.collectives, CollectiveKind::AllGather), 1);
  EXPECT_EQ(tp8.kv_heads_per_rank, 1);
  EXPECT_EQ(tp8.kv_replication, 1);
  EXPECT_EQ(tp8.kv_bytes_per_token, 96 * 1 * 128 * 2 * 2);
  // EP=8: 16 experts per rank; one all-reduce per MoE layer at batch 1.
  const LayoutPlan ep8 = plan_layout(c, o, {1, 8, 1});
  EXPECT_EQ(ep8.moe, MoeComm::AllReduce);
  EXPECT_EQ(calls_of(ep8.collectives, CollectiveKind::AllReduce), 48);
  EXPECT_EQ(calls_of(ep8.collectives_alt, CollectiveKind::AllToAll), 2 * 48);

  // 2 nodes of 256 GiB cannot hold 545 GiB of weights; 1.5 TiB each can at bf16 on 2 nodes.
  o.nodes = 2;
  EXPECT_THROW(plan_all(c, o), Error);
  o.memory_per_node = 1.5 * 1024 * kGiB;
  o.dtype = "bf16";
  EXPECT_TRUE(plan_all(c, o).front().fits);
  // 16 ranks of TP: 8 KV heads each on 2 ranks.
  o.nodes = 16;
  o.memory_per_node = 256 * kGiB;
  const LayoutPlan tp16 = plan_layout(c, o, {16, 1, 1});
  EXPECT_EQ(tp16.kv_replication, 2);
  EXPECT_EQ(tp16.kv_heads_per_rank, 1);
}

TEST(Plan, Zen6ShapedSplitsGatedDeltaNetHeads) {
  const ModelConfig c = load(kConfigs / "zen6_shaped/config.json");
  Options o;
  o.nodes = 8;
  o.memory_per_node = 16 * kGiB;
  o.network_gbps = 100;
  const LayoutPlan p = plan_layout(c, o, {8, 1, 1});
  ASSERT_TRUE(p.valid);
  // 16 attention + 48 Gated DeltaNet mixers + 64 MLPs + the embedding; argmax all-gather.
  EXPECT_EQ(calls_of(p.collectives, CollectiveKind::AllReduce), 16 + 48 + 64 + 1);
  EXPECT_EQ(calls_of(p.collectives, CollectiveKind::AllGather), 1);
  int64_t gdn_calls = 0;
  for (const CollectiveCall& call : p.collectives)
    if (call.purpose.find("Gated DeltaNet") != std::string::npos) gdn_calls += call.calls;
  EXPECT_EQ(gdn_calls, 48);
  // State split by heads: an eighth of the model's per sequence.
  EXPECT_EQ(p.stages[0].state_bytes_per_sequence * 8, recurrent_state_bytes(c));
  EXPECT_EQ(p.kv_replication, 2);  // 4 KV heads over 8 ranks
  // Per-rank GDN weights: an eighth of the layer's matrices.
  const GdnShape s = GdnShape::from_config(c);
  EXPECT_EQ(s.num_k_heads % 8, 0);
  EXPECT_NE(layout_problem(c, {3, 1, 1}), "");  // 4 KV heads, 16 GDN key heads: no split over 3
  EXPECT_NE(layout_problem(c, {32, 1, 1}), "");  // 24 query heads
  // PP=4: 16 layers per stage, 4 of them attention.
  Options four;
  four.nodes = 4;
  four.memory_per_node = 32 * kGiB;
  four.network_gbps = 100;
  const LayoutPlan pp = plan_layout(c, four, {1, 1, 4});
  for (const StagePlan& st : pp.stages) {
    EXPECT_EQ(st.layers, 16);
    EXPECT_EQ(st.kv_layers, 4);
    EXPECT_EQ(st.state_bytes_per_sequence * 4, recurrent_state_bytes(c));
  }
  EXPECT_EQ(calls_of(pp.collectives, CollectiveKind::Send), 4);
  EXPECT_TRUE(pp.fits);
}

}  // namespace
}  // namespace zen::plan
