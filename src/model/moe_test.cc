// MoE block: forward against a plain double-precision reference written from the contract in
// moe.h, batch invariance, decode touching only the chosen experts, and binding of the HF
// per-expert, HF fused and GGUF stacked layouts.
#include "model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>

#include "base/error.h"
#include "base/numeric.h"
#include "base/thread_pool.h"
#include "kernels/cpu/quant.h"
#include "io/io_test_writers.h"

namespace zen {
namespace {

// Weights of one MoE block held in memory, in f32 or bf16.
class InMemoryMoe {
 public:
  InMemoryMoe(const MoeShape& shape, DType dtype, uint32_t seed) : dtype_(dtype) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    const int64_t H = shape.hidden, I = shape.expert_intermediate, Is = shape.shared_intermediate;
    w_.shape = shape;
    w_.router = make("router", shape.num_experts, H, rng, normal, 1.5f);
    for (int64_t e = 0; e < shape.num_experts; ++e)
      w_.experts.push_back({make("gate", I, H, rng, normal), make("up", I, H, rng, normal),
                            make("down", H, I, rng, normal)});
    if (Is > 0) {
      w_.shared = {make("sgate", Is, H, rng, normal), make("sup", Is, H, rng, normal), make("sdown", H, Is, rng, normal)};
      w_.shared_gate = make("sg", 1, H, rng, normal);
    }
  }
  const MoeWeights& weights() const { return w_; }

  // Makes every element of expert e's matrices NaN (all-ones bytes: a NaN in f32 and bf16,
  // a NaN f16 block scale in Q8_0).
  void poison_expert(int64_t e) {
    for (Linear* L : {&w_.experts[e].gate, &w_.experts[e].up, &w_.experts[e].down})
      std::memset(const_cast<uint8_t*>(L->weight->data), 0xff, L->weight->nbytes);
  }

 private:
  Linear make(const std::string& name, int64_t rows, int64_t cols, std::mt19937& rng,
              std::normal_distribution<float>& normal, float gain = 1.0f) {
    const size_t count = static_cast<size_t>(rows * cols);
    std::vector<float> values(count);
    for (float& v : values) v = gain * normal(rng);
    auto& bytes = storage_.emplace_back(static_cast<size_t>(rows) * dtype_row_bytes(dtype_, cols));
    if (dtype_ == DType::F32) {
      std::memcpy(bytes.data(), values.data(), bytes.size());
    } else if (dtype_ == DType::BF16) {
      for (size_t i = 0; i < count; ++i) {
        const uint16_t b = f32_to_bf16(values[i]);
        std::memcpy(&bytes[i * 2], &b, 2);
      }
    } else {  // Q8_0, as llama.cpp quantizes weights of that type
      auto* blocks = reinterpret_cast<kernels::BlockQ8_0*>(bytes.data());
      kernels::ref::quantize_weight_row_q8_0(values.data(), blocks, static_cast<int64_t>(count));
    }
    TensorView& t = views_.emplace_back();
    t.name = name;
    t.dtype = dtype_;
    t.shape = {rows, cols};
    t.data = bytes.data();
    t.nbytes = bytes.size();
    Linear L;
    L.format = LinearFormat::Plain;
    L.name = name;
    L.rows = rows;
    L.cols = cols;
    L.weight = &t;
    return L;
  }

  DType dtype_;
  MoeWeights w_;
  std::deque<std::vector<uint8_t>> storage_;
  std::deque<TensorView> views_;
};

std::vector<double> dense_row(const Linear& L, int64_t r) {
  std::vector<float> row(static_cast<size_t>(L.cols));
  L.dequantize_row(r, row.data());
  return std::vector<double>(row.begin(), row.end());
}

// y = L x in double.
std::vector<double> matvec(const Linear& L, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(L.rows));
  for (int64_t r = 0; r < L.rows; ++r) {
    const std::vector<double> w = dense_row(L, r);
    y[r] = std::inner_product(w.begin(), w.end(), x.begin(), 0.0);
  }
  return y;
}

std::vector<double> expert(const MoeExpert& ex, const std::vector<double>& x) {
  std::vector<double> g = matvec(ex.gate, x), u = matvec(ex.up, x);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return matvec(ex.down, g);
}

// The contract of moe.h, straight from its formulas.
std::vector<double> reference_moe(const MoeWeights& w, const float* x_f32) {
  const MoeShape& s = w.shape;
  const std::vector<double> x(x_f32, x_f32 + s.hidden);
  std::vector<double> p = matvec(w.router, x);
  const double mx = *std::max_element(p.begin(), p.end());
  double z = 0.0;
  for (double& v : p) z += (v = std::exp(v - mx));
  for (double& v : p) v /= z;
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  double chosen_sum = 0.0;
  for (int64_t j = 0; j < s.top_k; ++j) chosen_sum += p[order[j]];
  std::vector<double> out(static_cast<size_t>(s.hidden), 0.0);
  for (int64_t j = 0; j < s.top_k; ++j) {
    const double weight = s.norm_topk_prob ? p[order[j]] / chosen_sum : p[order[j]];
    const std::vector<double> y = expert(w.experts[order[j]], x);
    for (size_t i = 0; i < out.size(); ++i) out[i] += weight * y[i];
  }
  if (s.shared_intermediate > 0) {
    const double gate = 1.0 / (1.0 + std::exp(-matvec(w.shared_gate, x)[0]));
    const std::vector<double> y = expert(w.shared, x);
    for (size_t i = 0; i < out.size(); ++i) out[i] += gate * y[i];
  }
  return out;
}

std::vector<float> random_tokens(int64_t n, int64_t H, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * H));
  for (float& v : x) v = normal(rng);
  return x;
}

struct Case {
  const char* name;
  MoeShape shape;
  DType dtype;
  // Against the double reference of the stored weights: f32 rounding, or for GGUF blocks the
  // Q8_0 quantization of the activations the kernels dot them with (as llama.cpp does; about
  // 1% of the largest output here, router included).
  double tolerance = 1e-5;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class MoeForward : public ::testing::TestWithParam<Case> {};

TEST_P(MoeForward, MatchesReference) {
  const Case& c = GetParam();
  InMemoryMoe moe(c.shape, c.dtype, 7);
  const int64_t n = 9, H = c.shape.hidden;
  const std::vector<float> x = random_tokens(n, H, 11);
  std::vector<float> out(static_cast<size_t>(n * H));
  ThreadPool pool(2);
  MoeScratch scratch;
  moe_forward(moe.weights(), x.data(), n, out.data(), pool, scratch);
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<double> ref = reference_moe(moe.weights(), &x[t * H]);
    double scale = 0.0, err = 0.0;
    for (int64_t i = 0; i < H; ++i) {
      scale = std::max(scale, std::fabs(ref[i]));
      err = std::max(err, std::fabs(ref[i] - out[t * H + i]));
    }
    EXPECT_LE(err, c.tolerance * scale + 1e-6) << "token " << t;
  }
}

// A token's output is bit-identical whether it runs alone or with other tokens.
TEST_P(MoeForward, BatchInvariant) {
  const Case& c = GetParam();
  InMemoryMoe moe(c.shape, c.dtype, 8);
  const int64_t n = 13, H = c.shape.hidden;
  const std::vector<float> x = random_tokens(n, H, 12);
  std::vector<float> together(static_cast<size_t>(n * H)), alone(static_cast<size_t>(H));
  ThreadPool pool(2);
  MoeScratch scratch;
  moe_forward(moe.weights(), x.data(), n, together.data(), pool, scratch);
  for (int64_t t = 0; t < n; ++t) {
    moe_forward(moe.weights(), &x[t * H], 1, alone.data(), pool, scratch);
    EXPECT_EQ(0, std::memcmp(alone.data(), &together[t * H], H * sizeof(float))) << "token " << t;
  }
  // And inside a different batch: the same tokens reversed.
  std::vector<float> reversed(x.size()), out_rev(x.size());
  for (int64_t t = 0; t < n; ++t) std::memcpy(&reversed[t * H], &x[(n - 1 - t) * H], H * sizeof(float));
  moe_forward(moe.weights(), reversed.data(), n, out_rev.data(), pool, scratch);
  for (int64_t t = 0; t < n; ++t)
    EXPECT_EQ(0, std::memcmp(&out_rev[t * H], &together[(n - 1 - t) * H], H * sizeof(float))) << "token " << t;
}

// One thread runs every expert's rows split over the pool; with more threads, decode runs
// whole experts per thread (moe.cc). Both must give the same bits.
TEST_P(MoeForward, PoolSizeInvariant) {
  const Case& c = GetParam();
  InMemoryMoe moe(c.shape, c.dtype, 10);
  const int64_t H = c.shape.hidden;
  for (int64_t n : {1, 2, 5}) {
    const std::vector<float> x = random_tokens(n, H, 14);
    std::vector<float> one(static_cast<size_t>(n * H)), many(static_cast<size_t>(n * H));
    ThreadPool pool1(1), pool3(3);
    MoeScratch s1, s3;
    moe_forward(moe.weights(), x.data(), n, one.data(), pool1, s1);
    moe_forward(moe.weights(), x.data(), n, many.data(), pool3, s3);
    EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float))) << "n " << n;
  }
}

// Decode reads the chosen experts only: NaN in every other expert leaves the output unchanged.
TEST_P(MoeForward, DecodeReadsOnlyChosenExperts) {
  const Case& c = GetParam();
  InMemoryMoe moe(c.shape, c.dtype, 9);
  const int64_t H = c.shape.hidden, k = c.shape.top_k;
  const std::vector<float> x = random_tokens(1, H, 13);
  std::vector<float> before(static_cast<size_t>(H)), after(static_cast<size_t>(H));
  ThreadPool pool(2);
  MoeScratch scratch;
  moe_forward(moe.weights(), x.data(), 1, before.data(), pool, scratch);
  const std::vector<int32_t> chosen(scratch.chosen.begin(), scratch.chosen.begin() + k);
  for (int64_t e = 0; e < c.shape.num_experts; ++e)
    if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) moe.poison_expert(e);
  moe_forward(moe.weights(), x.data(), 1, after.data(), pool, scratch);
  EXPECT_EQ(0, std::memcmp(before.data(), after.data(), H * sizeof(float)));
}

MoeShape shape(int64_t H, int64_t E, int64_t k, int64_t I, int64_t Is, bool norm) {
  MoeShape s;
  s.hidden = H;
  s.num_experts = E;
  s.top_k = k;
  s.expert_intermediate = I;
  s.shared_intermediate = Is;
  s.norm_topk_prob = norm;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeForward,
    ::testing::Values(Case{"f32_top2_norm", shape(40, 6, 2, 24, 0, true), DType::F32},
                      Case{"f32_top3_raw", shape(33, 7, 3, 17, 0, false), DType::F32},
                      Case{"f32_shared_expert", shape(40, 8, 2, 24, 20, true), DType::F32},
                      Case{"bf16_top1_shared", shape(64, 5, 1, 32, 48, true), DType::BF16},
                      // top-8 of 16: decode takes the one-expert-per-thread path.
                      Case{"f32_top8_of_16", shape(48, 16, 8, 16, 0, true), DType::F32},
                      Case{"q8_0_top4_of_8_shared", shape(64, 8, 4, 32, 32, true), DType::Q8_0, 3e-2}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Config.

nlohmann::json qwen3_moe_config() {
  return {{"model_type", "qwen3_moe"}, {"vocab_size", 64}, {"hidden_size", 32}, {"intermediate_size", 64},
          {"num_hidden_layers", 6}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 8},
          {"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 16}};
}

std::string config_error(const nlohmann::json& j) {
  try {
    ModelConfig::from_hf(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoeConfig, SparseLayerRuleOfTransformers) {
  nlohmann::json j = qwen3_moe_config();
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  const ModelConfig c = ModelConfig::from_hf(j);
  EXPECT_FALSE(c.norm_topk_prob);  // qwen3_moe's default
  std::vector<int64_t> sparse;
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (c.is_sparse_layer(l)) sparse.push_back(l);
  // (l + 1) % 2 == 0 -> 1, 3, 5; 3 is listed in mlp_only_layers.
  EXPECT_EQ(sparse, (std::vector<int64_t>{1, 5}));
  // transformers 5 writes num_local_experts (an alias of num_experts).
  j.erase("num_experts");
  j["num_local_experts"] = 4;
  EXPECT_EQ(ModelConfig::from_hf(j).num_experts, 4);
}

TEST(MoeConfig, BadValuesAreErrors) {
  auto with = [](const char* key, nlohmann::json v) {
    nlohmann::json j = qwen3_moe_config();
    j[key] = std::move(v);
    return config_error(j);
  };
  EXPECT_NE(with("num_experts_per_tok", 9).find("num_experts_per_tok"), std::string::npos);
  EXPECT_NE(with("num_experts_per_tok", 0).find("num_experts_per_tok"), std::string::npos);
  EXPECT_NE(with("moe_intermediate_size", 0).find("moe_intermediate_size"), std::string::npos);
  EXPECT_NE(with("decoder_sparse_step", 0).find("decoder_sparse_step"), std::string::npos);
  EXPECT_NE(with("mlp_only_layers", "1").find("mlp_only_layers"), std::string::npos);
  EXPECT_NE(with("mlp_only_layers", {"a"}).find("mlp_only_layers"), std::string::npos);
  EXPECT_NE(with("norm_topk_prob", 1).find("norm_topk_prob"), std::string::npos);
  EXPECT_NE(with("num_experts", -1).find("num_experts"), std::string::npos);
  EXPECT_EQ(with("norm_topk_prob", true), "");
}

// ---------------------------------------------------------------------------------------------
// Binding.

using namespace testing_io;

constexpr int64_t kH = 32, kE = 4, kI = 64, kIs = 32;

std::unique_ptr<Checkpoint> open_hf(const SafetensorsBuilder& b) {
  const std::string dir = temp_path("moe_hf");
  std::filesystem::create_directories(dir);
  write_file(dir + "/config.json", R"({"architectures": ["Qwen3MoeForCausalLM"]})");
  write_file(dir + "/model.safetensors", b.build());
  return Checkpoint::open(dir);
}

TEST(MoeBind, HfPerExpertWithSharedExpert) {
  SafetensorsBuilder b;
  const std::string p = "model.layers.0.mlp.";
  b.add(p + "gate.weight", "BF16", {kE, kH}, 2);
  for (int e = 0; e < kE; ++e) {
    const std::string q = p + "experts." + std::to_string(e) + ".";
    b.add(q + "gate_proj.weight", "BF16", {kI, kH}, 2);
    b.add(q + "up_proj.weight", "BF16", {kI, kH}, 2);
    b.add(q + "down_proj.weight", "BF16", {kH, kI}, 2);
  }
  b.add(p + "shared_expert.gate_proj.weight", "BF16", {kIs, kH}, 2);
  b.add(p + "shared_expert.up_proj.weight", "BF16", {kIs, kH}, 2);
  b.add(p + "shared_expert.down_proj.weight", "BF16", {kH, kIs}, 2);
  b.add(p + "shared_expert_gate.weight", "BF16", {1, kH}, 2);
  auto ck = open_hf(b);
  const MoeWeights w = bind_moe(*ck, "model.layers.0.mlp", shape(kH, kE, 2, kI, kIs, true), QuantConfig{});
  EXPECT_TRUE(w.valid());
  EXPECT_TRUE(ck->verdict().ok()) << ck->verdict().to_string();
  EXPECT_EQ(w.experts[3].down.weight->name, p + "experts.3.down_proj.weight");
}

TEST(MoeBind, HfMissingExpertIsNamed) {
  SafetensorsBuilder b;
  const std::string p = "model.layers.2.mlp.";
  b.add(p + "gate.weight", "F32", {kE, kH});
  for (int e = 0; e < kE; ++e) {
    const std::string q = p + "experts." + std::to_string(e) + ".";
    b.add(q + "gate_proj.weight", "F32", {kI, kH});
    if (e != 1) b.add(q + "up_proj.weight", "F32", {kI, kH});
    b.add(q + "down_proj.weight", "F32", {kH, kI});
  }
  auto ck = open_hf(b);
  const MoeWeights w = bind_moe(*ck, "model.layers.2.mlp", shape(kH, kE, 2, kI, 0, true), QuantConfig{});
  EXPECT_FALSE(w.valid());
  const LoadVerdict v = ck->verdict();
  ASSERT_EQ(v.missing.size(), 1u);
  EXPECT_EQ(v.missing[0], p + "experts.1.up_proj.weight");
}

// transformers 5's in-memory layout: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I].
TEST(MoeBind, HfFusedExperts) {
  SafetensorsBuilder b;
  const std::string p = "model.layers.0.mlp.";
  b.add(p + "gate.weight", "F32", {kE, kH});
  b.add(p + "experts.gate_up_proj", "F32", {kE, 2 * kI, kH});
  b.add(p + "experts.down_proj", "F32", {kE, kH, kI});
  auto ck = open_hf(b);
  const MoeWeights w = bind_moe(*ck, "model.layers.0.mlp", shape(kH, kE, 2, kI, 0, false), QuantConfig{});
  ASSERT_TRUE(w.valid());
  EXPECT_TRUE(ck->verdict().ok()) << ck->verdict().to_string();
  const TensorView* gate_up = ck->peek(p + "experts.gate_up_proj");
  const size_t row = kH * sizeof(float);
  EXPECT_EQ(w.experts[2].gate.weight->data, gate_up->data + (2 * 2 * kI) * row);
  EXPECT_EQ(w.experts[2].up.weight->data, gate_up->data + (2 * 2 * kI + kI) * row);
  EXPECT_EQ(w.experts[3].down.weight->data, ck->peek(p + "experts.down_proj")->data + 3 * kH * kI * sizeof(float));
  EXPECT_EQ(w.experts[3].down.rows, kH);
  EXPECT_EQ(w.experts[3].down.cols, kI);
}

// llama.cpp: ffn_{gate,up,down}_exps stacked per layer, a Q8_0 block format here.
TEST(MoeBind, GgufStackedExperts) {
  GgufBuilder b;
  b.add_string("general.architecture", "qwen3moe");
  b.add_tensor("blk.1.ffn_gate_inp.weight", {kH, kE});
  b.add_tensor("blk.1.ffn_gate_exps.weight", {kH, kI, kE}, kGgmlQ8_0);
  b.add_tensor("blk.1.ffn_up_exps.weight", {kH, kI, kE}, kGgmlQ8_0);
  b.add_tensor("blk.1.ffn_down_exps.weight", {kI, kH, kE}, kGgmlQ8_0);
  b.add_tensor("blk.1.ffn_gate_shexp.weight", {kH, kIs});
  b.add_tensor("blk.1.ffn_up_shexp.weight", {kH, kIs});
  b.add_tensor("blk.1.ffn_down_shexp.weight", {kIs, kH});
  b.add_tensor("blk.1.ffn_gate_inp_shexp.weight", {kH});
  const std::string path = temp_path("moe.gguf");
  write_file(path, b.build());
  auto ck = Checkpoint::open(path);
  const MoeWeights w = bind_moe(*ck, "blk.1", shape(kH, kE, 2, kI, kIs, true), QuantConfig{});
  ASSERT_TRUE(w.valid());
  EXPECT_TRUE(ck->verdict().ok()) << ck->verdict().to_string();
  const size_t q8_row = kH / 32 * 34;  // bytes of one Q8_0 row of K = kH
  EXPECT_EQ(w.experts[1].up.weight->data, ck->peek("blk.1.ffn_up_exps.weight")->data + kI * q8_row);
  EXPECT_EQ(w.experts[1].up.weight->dtype, DType::Q8_0);
  EXPECT_EQ(w.shared_gate.rows, 1);
  EXPECT_EQ(w.shared_gate.cols, kH);
}

TEST(MoeBind, GgufWrongExpertCountIsNamed) {
  GgufBuilder b;
  b.add_string("general.architecture", "qwen3moe");
  b.add_tensor("blk.0.ffn_gate_inp.weight", {kH, kE});
  b.add_tensor("blk.0.ffn_gate_exps.weight", {kH, kI, kE - 1});
  b.add_tensor("blk.0.ffn_up_exps.weight", {kH, kI, kE});
  b.add_tensor("blk.0.ffn_down_exps.weight", {kI, kH, kE});
  const std::string path = temp_path("moe_bad.gguf");
  write_file(path, b.build());
  auto ck = Checkpoint::open(path);
  const MoeWeights w = bind_moe(*ck, "blk.0", shape(kH, kE, 2, kI, 0, true), QuantConfig{});
  EXPECT_FALSE(w.valid());
  const LoadVerdict v = ck->verdict();
  ASSERT_EQ(v.mismatched.size(), 1u);
  EXPECT_NE(v.mismatched[0].find("blk.0.ffn_gate_exps.weight"), std::string::npos) << v.mismatched[0];
}

// ---------------------------------------------------------------------------------------------
// Tensor-parallel shards: every expert's rows split (gate/up rows, down columns) or whole
// experts per rank; the ranks' outputs sum to the whole block's.

// Fills a built GGUF file's tensors with random values: f32 normal(0, 0.3) x gain, and Q8_0
// blocks with small f16 scales and random int8s.
void randomize_gguf(std::string& file, const GgufBuilder& b, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::uniform_int_distribution<int> q(-127, 127);
  const size_t data = (b.header().size() + b.alignment - 1) / b.alignment * b.alignment;
  for (const GgufTensorSpec& t : b.tensors) {
    char* at = file.data() + data + t.offset;
    if (t.type == kGgmlQ8_0) {
      for (uint64_t blk = 0; blk < t.nbytes / 34; ++blk, at += 34) {
        const uint16_t scale = f32_to_f16(0.3f / 64.0f * (1.0f + 0.5f * std::fabs(normal(rng))));
        std::memcpy(at, &scale, 2);
        for (int i = 0; i < 32; ++i) at[2 + i] = static_cast<char>(q(rng));
      }
    } else {
      ASSERT_EQ(t.type, kGgmlF32);
      for (uint64_t i = 0; i < t.nbytes / 4; ++i) {
        const float v = normal(rng) * (t.name.find("gate_inp") != std::string::npos ? 5.0f : 1.0f);
        std::memcpy(at + 4 * i, &v, 4);
      }
    }
  }
}

ModelConfig moe_config(int64_t E, int64_t I, int64_t Is) {
  ModelConfig c;
  c.num_experts = E;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = I;
  c.shared_expert_intermediate_size = Is;
  return c;
}

// out[n, H] of the block bound from `path` with `shard`.
std::vector<float> shard_output(const std::string& path, const std::string& prefix, const MoeShape& s,
                                const MoeShard& shard, const std::vector<float>& x, int64_t n) {
  auto ck = Checkpoint::open(path);
  const MoeWeights w = bind_moe(*ck, prefix, s, QuantConfig{}, shard);
  EXPECT_TRUE(w.valid());
  EXPECT_TRUE(ck->verdict().ok()) << ck->verdict().to_string();
  ThreadPool pool(2);
  MoeScratch scratch;
  std::vector<float> out(static_cast<size_t>(n * s.hidden));
  moe_forward(w, x.data(), n, out.data(), pool, scratch);
  return out;
}

void expect_shards_sum_to_whole(const std::string& path, const std::string& prefix, const MoeShape& s, int t,
                                bool expert_parallel) {
  SCOPED_TRACE(prefix + " t=" + std::to_string(t) + (expert_parallel ? " ep" : " tp"));
  const int64_t n = 7;
  const std::vector<float> x = random_tokens(n, s.hidden, 11);
  const std::vector<float> whole = shard_output(path, prefix, s, {}, x, n);
  auto ck = Checkpoint::open(path);
  const MoeColumnBlocks blocks = moe_column_blocks(*ck, prefix, QuantConfig{});
  const ModelConfig cfg = moe_config(s.num_experts, s.expert_intermediate, s.shared_intermediate);
  std::vector<float> sum(whole.size(), 0.0f);
  for (int r = 0; r < t; ++r) {
    const MoeShard shard = moe_shard(cfg, t, r, expert_parallel, blocks);
    EXPECT_EQ(shard.expert_rows.size(), expert_parallel ? s.expert_intermediate : s.expert_intermediate / t);
    const std::vector<float> part = shard_output(path, prefix, s, shard, x, n);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  float scale = 0.0f, diff = 0.0f;
  for (size_t i = 0; i < sum.size(); ++i) {
    scale = std::max(scale, std::fabs(whole[i]));
    diff = std::max(diff, std::fabs(sum[i] - whole[i]));
  }
  EXPECT_GT(scale, 0.0f);
  EXPECT_LE(diff, 1e-5f * scale);  // only the order of the sum over ranks changes
}

TEST(MoeShard, GgufQ8_0StackedShardsSumToTheWhole) {
  GgufBuilder b;
  b.add_string("general.architecture", "qwen3moe");
  b.add_tensor("blk.0.ffn_gate_inp.weight", {kH, kE});
  b.add_tensor("blk.0.ffn_gate_exps.weight", {kH, kI, kE}, kGgmlQ8_0);
  b.add_tensor("blk.0.ffn_up_exps.weight", {kH, kI, kE}, kGgmlQ8_0);
  b.add_tensor("blk.0.ffn_down_exps.weight", {kI, kH, kE}, kGgmlQ8_0);
  b.add_tensor("blk.0.ffn_gate_shexp.weight", {kH, kIs}, kGgmlQ8_0);
  b.add_tensor("blk.0.ffn_up_shexp.weight", {kH, kIs}, kGgmlQ8_0);
  b.add_tensor("blk.0.ffn_down_shexp.weight", {kIs, kH});
  b.add_tensor("blk.0.ffn_gate_inp_shexp.weight", {kH});
  std::string file = b.build();
  randomize_gguf(file, b, 5);
  const std::string path = temp_path("moe_tp.gguf");
  write_file(path, file);
  const MoeShape s = shape(kH, kE, 2, kI, kIs, true);
  expect_shards_sum_to_whole(path, "blk.0", s, 2, false);  // 32 of 64 rows each: one Q8_0 block
  expect_shards_sum_to_whole(path, "blk.0", s, 2, true);
  // Four ranks would cut the down projection's 64 columns inside its Q8_0 blocks of 32.
  auto ck = Checkpoint::open(path);
  const MoeColumnBlocks blocks = moe_column_blocks(*ck, "blk.0", QuantConfig{});
  EXPECT_EQ(blocks.experts, 32);
  EXPECT_EQ(blocks.shared, 1);
  try {
    moe_shard(moe_config(kE, kI, kIs), 4, 2, false, blocks);
    ADD_FAILURE() << "a rank without rows was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("intermediate size 64 in blocks of 32 leaves rank 2 no rows"),
              std::string::npos)
        << e.what();
  }
}

TEST(MoeShard, HfFusedAndPerExpertShardsSumToTheWhole) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  // Writes F32 safetensors whose tensor i holds random values (the router's scaled up).
  auto write = [&](SafetensorsBuilder& b, const std::string& name) {
    std::string data = b.data();
    for (size_t i = 0; i + 4 <= data.size(); i += 4) {
      const float v = normal(rng);
      std::memcpy(&data[i], &v, 4);
    }
    const std::string dir = temp_path(name);
    std::filesystem::create_directories(dir);
    write_file(dir + "/config.json", R"({"architectures": ["Qwen3MoeForCausalLM"]})");
    write_file(dir + "/model.safetensors", safetensors_bytes(b.header_json(), data));
    return dir;
  };
  const std::string p = "model.layers.0.mlp.";
  SafetensorsBuilder fused;
  fused.add(p + "gate.weight", "F32", {kE, kH});
  fused.add(p + "experts.gate_up_proj", "F32", {kE, 2 * kI, kH});
  fused.add(p + "experts.down_proj", "F32", {kE, kH, kI});
  const std::string fused_dir = write(fused, "moe_tp_fused");
  SafetensorsBuilder per;
  per.add(p + "gate.weight", "F32", {kE, kH});
  for (int e = 0; e < kE; ++e) {
    const std::string q = p + "experts." + std::to_string(e) + ".";
    per.add(q + "gate_proj.weight", "F32", {kI, kH});
    per.add(q + "up_proj.weight", "F32", {kI, kH});
    per.add(q + "down_proj.weight", "F32", {kH, kI});
  }
  per.add(p + "shared_expert.gate_proj.weight", "F32", {kIs, kH});
  per.add(p + "shared_expert.up_proj.weight", "F32", {kIs, kH});
  per.add(p + "shared_expert.down_proj.weight", "F32", {kH, kIs});
  per.add(p + "shared_expert_gate.weight", "F32", {1, kH});
  const std::string per_dir = write(per, "moe_tp_per_expert");
  for (int t : {2, 4}) {
    expect_shards_sum_to_whole(fused_dir, "model.layers.0.mlp", shape(kH, kE, 2, kI, 0, false), t, false);
    expect_shards_sum_to_whole(per_dir, "model.layers.0.mlp", shape(kH, kE, 2, kI, kIs, true), t, false);
    expect_shards_sum_to_whole(per_dir, "model.layers.0.mlp", shape(kH, kE, 2, kI, kIs, true), t, true);
  }
}

}  // namespace
}  // namespace zen
