// Linear: binding FP8 / NVFP4 / plain weights with their scales from the ledger, errors that
// name the offending tensor, and golden tests of the FP8 / NVFP4 fixture models
// (tools/make_fp_quant_fixtures.py) against transformers on the dequantized weights.
#include "model/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/io_test_writers.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
using testing_io::SafetensorsBuilder;

const fs::path kFixtures = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/fpquant";

// A checkpoint folder holding `st` and a config.json with `quantization_config` (null: none),
// plus hf_quant_config.json when given.
std::string write_folder(const SafetensorsBuilder& st, const nlohmann::json& quantization_config,
                         const nlohmann::json& hf_quant = nullptr) {
  const std::string dir = testing_io::temp_path("linear");
  fs::create_directories(dir);
  testing_io::write_file(dir + "/model.safetensors", st.build());
  nlohmann::json cfg = {{"architectures", {"Qwen3ForCausalLM"}}};
  if (!quantization_config.is_null()) cfg["quantization_config"] = quantization_config;
  testing_io::write_file(dir + "/config.json", cfg.dump());
  if (!hf_quant.is_null()) testing_io::write_file(dir + "/hf_quant_config.json", hf_quant.dump());
  return dir;
}

nlohmann::json modelopt(const std::string& algo, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json q = {{"quant_algo", algo}, {"exclude_modules", {"lm_head"}}};
  if (algo == "NVFP4") q["group_size"] = 16;
  q.update(extra);
  return {{"producer", {{"name", "modelopt"}}}, {"quantization", q}};
}

// m.weight NVFP4 [rows, 16]: U8 [rows, 8], F8_E4M3 scale [rows, 1], f32 scalars.
SafetensorsBuilder nvfp4_tensors(int64_t rows, std::vector<int64_t> scale_shape = {}) {
  SafetensorsBuilder b;
  b.add("m.weight", "U8", {rows, 8}, 1);
  b.add("m.weight_scale", "F8_E4M3", scale_shape.empty() ? std::vector<int64_t>{rows, 1} : scale_shape, 1);
  b.add("m.weight_scale_2", "F32", {}, 4);
  b.add("m.input_scale", "F32", {}, 4);
  return b;
}

bool mentions(const std::vector<std::string>& list, const std::string& name) {
  return std::any_of(list.begin(), list.end(), [&](const std::string& s) { return s.find(name) != std::string::npos; });
}

struct Bound {
  std::unique_ptr<Checkpoint> ckpt;
  Linear linear;
  LoadVerdict verdict;
};

Bound bind_one(const std::string& dir, const std::string& name, std::vector<int64_t> shape) {
  Bound b;
  b.ckpt = Checkpoint::open(dir);
  const QuantConfig q = QuantConfig::from_checkpoint(*b.ckpt);
  b.linear = Linear::bind(*b.ckpt, name, std::move(shape), q);
  b.verdict = b.ckpt->verdict();
  return b;
}

// y from Linear::matmul against the dot products of its dequantized rows.
void expect_matmul_matches_rows(const Linear& L) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  constexpr int64_t T = 3;
  std::vector<float> x(static_cast<size_t>(T * L.cols)), y(static_cast<size_t>(T * L.rows)), row(static_cast<size_t>(L.cols));
  for (float& v : x) v = normal(rng);
  ThreadPool pool(2);
  L.matmul(x.data(), T, y.data(), pool);
  for (int64_t r = 0; r < L.rows; ++r) {
    L.dequantize_row(r, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double exact = 0.0, mag = 0.0;
      for (int64_t k = 0; k < L.cols; ++k) {
        exact += static_cast<double>(row[k]) * x[t * L.cols + k];
        mag += std::fabs(static_cast<double>(row[k]) * x[t * L.cols + k]);
      }
      EXPECT_NEAR(y[t * L.rows + r], exact, 1e-5 * mag + 1e-30) << L.name << " r " << r << " t " << t;
    }
  }
}

TEST(LinearBind, Nvfp4TakesWeightAndScales) {
  const Bound b = bind_one(write_folder(nvfp4_tensors(5), nullptr, modelopt("NVFP4")), "m.weight", {5, 16});
  EXPECT_EQ(b.linear.format, LinearFormat::Nvfp4);
  EXPECT_TRUE(b.verdict.ok()) << b.verdict.to_string();
  EXPECT_GT(b.linear.input_scale, 0.0f);
  expect_matmul_matches_rows(b.linear);
}

TEST(LinearBind, Fp8PerTensorAcceptsScalarShapes) {
  for (const std::vector<int64_t>& scalar : {std::vector<int64_t>{}, std::vector<int64_t>{1}}) {
    SafetensorsBuilder st;
    st.add("m.weight", "F8_E4M3", {6, 20}, 1);
    st.add("m.weight_scale", "F32", scalar, 4);
    st.add("m.input_scale", "F32", scalar, 4);
    const Bound b = bind_one(write_folder(st, nullptr, modelopt("FP8")), "m.weight", {6, 20});
    EXPECT_EQ(b.linear.format, LinearFormat::Fp8);
    EXPECT_TRUE(b.verdict.ok()) << b.verdict.to_string();
    expect_matmul_matches_rows(b.linear);
  }
}

const nlohmann::json kQwenFp8 = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};

TEST(LinearBind, Fp8BlockWithPartialBlocks) {
  SafetensorsBuilder st;
  st.add("m.weight", "F8_E4M3", {130, 20}, 1);
  st.add("m.weight_scale_inv", "F32", {2, 1}, 4);
  const Bound b = bind_one(write_folder(st, kQwenFp8), "m.weight", {130, 20});
  EXPECT_EQ(b.linear.format, LinearFormat::Fp8Block);
  EXPECT_TRUE(b.verdict.ok()) << b.verdict.to_string();
  expect_matmul_matches_rows(b.linear);
}

TEST(LinearBind, Fp8BlockScaleOfWrongShapeIsNamed) {
  SafetensorsBuilder st;
  st.add("m.weight", "F8_E4M3", {130, 20}, 1);
  st.add("m.weight_scale_inv", "F32", {1, 1}, 4);
  const Bound b = bind_one(write_folder(st, kQwenFp8), "m.weight", {130, 20});
  EXPECT_FALSE(b.linear.valid());
  EXPECT_TRUE(mentions(b.verdict.mismatched, "m.weight_scale_inv")) << b.verdict.to_string();
}

TEST(LinearBind, Nvfp4ScaleOfWrongShapeIsNamed) {
  const Bound b = bind_one(write_folder(nvfp4_tensors(5, {5, 2}), nullptr, modelopt("NVFP4")), "m.weight", {5, 16});
  EXPECT_FALSE(b.linear.valid());
  EXPECT_TRUE(mentions(b.verdict.mismatched, "m.weight_scale: expected shape [5, 1]")) << b.verdict.to_string();
}

TEST(LinearBind, MissingScaleIsNamed) {
  SafetensorsBuilder st;
  st.add("m.weight", "U8", {5, 8}, 1);
  st.add("m.weight_scale", "F8_E4M3", {5, 1}, 1);
  const Bound b = bind_one(write_folder(st, nullptr, modelopt("NVFP4")), "m.weight", {5, 16});
  EXPECT_FALSE(b.linear.valid());
  EXPECT_EQ(b.verdict.missing, std::vector<std::string>{"m.weight_scale_2"});
}

TEST(LinearBind, NonScalarGlobalScaleIsNamed) {
  SafetensorsBuilder st = nvfp4_tensors(5);
  st.specs[2].shape = {2};
  const Bound b = bind_one(write_folder(st, nullptr, modelopt("NVFP4")), "m.weight", {5, 16});
  EXPECT_FALSE(b.linear.valid());
  EXPECT_TRUE(mentions(b.verdict.mismatched, "m.weight_scale_2: expected a scalar")) << b.verdict.to_string();
}

TEST(LinearBind, StoredDtypeContradictingTheConfigIsNamed) {
  // FP8 bytes where the config declares NVFP4.
  SafetensorsBuilder fp8;
  fp8.add("m.weight", "F8_E4M3", {5, 16}, 1);
  fp8.add("m.weight_scale", "F32", {}, 4);
  Bound b = bind_one(write_folder(fp8, nullptr, modelopt("NVFP4")), "m.weight", {5, 16});
  EXPECT_FALSE(b.linear.valid());
  EXPECT_TRUE(mentions(b.verdict.mismatched, "m.weight: stored as F8_E4M3")) << b.verdict.to_string();
  // NVFP4 codes without any quantization config.
  b = bind_one(write_folder(nvfp4_tensors(5), nullptr), "m.weight", {5, 16});
  EXPECT_FALSE(b.linear.valid());
  EXPECT_TRUE(mentions(b.verdict.mismatched, "m.weight: stored as U8")) << b.verdict.to_string();
  // NVFP4 codes in an excluded module.
  b = bind_one(write_folder(nvfp4_tensors(5), nullptr, modelopt("NVFP4", {{"exclude_modules", {"m"}}})), "m.weight",
               {5, 16});
  EXPECT_FALSE(b.linear.valid());
}

// The Qwen3.6-NVFP4 trap: a BF16 mtp.fc.weight that exclude_modules forgot. Stored dtype wins.
TEST(LinearBind, Bf16WeightMissingFromExcludeModulesLoadsAsBf16) {
  SafetensorsBuilder st;
  st.add("mtp.fc.weight", "BF16", {4, 32}, 2);
  const Bound b = bind_one(write_folder(st, nullptr, modelopt("NVFP4")), "mtp.fc.weight", {4, 32});
  EXPECT_EQ(b.linear.format, LinearFormat::Plain);
  EXPECT_TRUE(b.verdict.ok()) << b.verdict.to_string();
  expect_matmul_matches_rows(b.linear);
}

std::string load_error(const std::string& dir) {
  try {
    auto ck = Checkpoint::open(dir);
    QuantConfig::from_checkpoint(*ck);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QuantConfig, BadMetadataIsAnError) {
  const SafetensorsBuilder st = nvfp4_tensors(5);
  std::string err = load_error(write_folder(st, nullptr, modelopt("INT3")));
  EXPECT_NE(err.find("unsupported quant_algo 'INT3'"), std::string::npos) << err;
  EXPECT_NE(err.find("hf_quant_config.json"), std::string::npos) << err;
  err = load_error(write_folder(st, nullptr, modelopt("NVFP4", {{"group_size", 32}})));
  EXPECT_NE(err.find("group_size must be 16"), std::string::npos) << err;
  err = load_error(write_folder(st, nullptr,
                                modelopt("MIXED_PRECISION", {{"quantized_layers", {{"m", {{"quant_algo", "NVFP4"}, {"group_size", 64}}}}}})));
  EXPECT_NE(err.find("quantized_layers.m"), std::string::npos) << err;
  err = load_error(write_folder(st, {{"quant_method", "awq"}}));
  EXPECT_NE(err.find("unsupported quant_method 'awq'"), std::string::npos) << err;
  err = load_error(write_folder(st, {{"quant_method", "fp8"}, {"weight_block_size", {128}}}));
  EXPECT_NE(err.find("weight_block_size"), std::string::npos) << err;
}

TEST(QuantConfig, DeclaredAlgorithmPerModule) {
  const QuantConfig q = QuantConfig::from_hf_quant_config(
      {{"quantization",
        {{"quant_algo", "MIXED_PRECISION"},
         {"exclude_modules", {"lm_head", "model.layers.*.mlp.gate"}},
         {"quantized_layers", {{"a.q_proj", {{"quant_algo", "FP8"}}}, {"a.up_proj", {{"quant_algo", "NVFP4"}, {"group_size", 16}}}}}}}},
      "test");
  EXPECT_EQ(q.declared_for("a.q_proj"), QuantAlgo::Fp8);
  EXPECT_EQ(q.declared_for("a.up_proj"), QuantAlgo::Nvfp4);
  EXPECT_EQ(q.declared_for("lm_head"), QuantAlgo::None);
  EXPECT_EQ(q.declared_for("other"), QuantAlgo::None);
  EXPECT_TRUE(glob_match("model.layers.*.mlp.gate", "model.layers.12.mlp.gate"));
  EXPECT_FALSE(glob_match("model.layers.*.mlp.gate", "model.layers.12.mlp.gate_proj"));
}

// ---------------------------------------------------------------------------------------------
// Golden: the fixture models against transformers on the dequantized weights.

struct Reference {
  std::vector<int32_t> prompt, greedy;
  std::vector<float> logits;           // [T, V]
  std::vector<float> logits_int8_act;  // [T, V] or empty: with the int8 path's activation rounding
};

bool has_tensor(const SafetensorsFile& f, const std::string& name) {
  for (const TensorView& t : f.tensors())
    if (t.name == name) return true;
  return false;
}

template <typename T>
std::vector<T> tensor_copy(const SafetensorsFile& f, const std::string& name) {
  for (const TensorView& t : f.tensors())
    if (t.name == name) {
      std::vector<T> v(static_cast<size_t>(t.numel()));
      std::memcpy(v.data(), t.data, t.nbytes);
      return v;
    }
  ADD_FAILURE() << "reference lacks " << name;
  return {};
}

class GoldenFpQuant : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const fs::path ref_path = kFixtures / (GetParam() + ".reference.safetensors");
    if (!fs::exists(ref_path)) GTEST_SKIP() << "fixture absent: " << ref_path;
    const SafetensorsFile f(ref_path.string());
    ref_.prompt = tensor_copy<int32_t>(f, "prompt");
    ref_.greedy = tensor_copy<int32_t>(f, "greedy");
    ref_.logits = tensor_copy<float>(f, "logits");
    if (has_tensor(f, "logits_int8_act")) ref_.logits_int8_act = tensor_copy<float>(f, "logits_int8_act");
    model_ = Model::load((kFixtures / GetParam()).string(), {.load_tokenizer = false, .nvfp4_exact_activations = true});
    vocab_ = model_->config().vocab_size;
    ASSERT_EQ(ref_.logits.size(), ref_.prompt.size() * static_cast<size_t>(vocab_));
    for (float v : ref_.logits) scale_ = std::max(scale_, std::fabs(v));
  }
  float max_err(const float* a, const float* b, size_t n) const {
    float m = 0.0f;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
  }
  // Prefills the prompt in two pieces (the last logits within rel_bound of the reference),
  // then decodes greedily as many tokens as the reference holds.
  std::vector<int32_t> greedy_in_two_chunks(Model& model, float rel_bound) const {
    const size_t steps = ref_.greedy.size(), n = ref_.prompt.size();
    auto cache = model.new_cache(static_cast<int64_t>(n + steps));
    std::vector<float> logits(static_cast<size_t>(vocab_));
    const std::span<const int32_t> prompt(ref_.prompt);
    model.forward(*cache, prompt.first(n / 2), logits.data(), false);
    model.forward(*cache, prompt.subspan(n / 2), logits.data(), false);
    EXPECT_LE(max_err(logits.data(), &ref_.logits[(n - 1) * vocab_], logits.size()), rel_bound * scale_);
    std::vector<int32_t> generated;
    for (size_t i = 0; i < steps; ++i) {
      const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      generated.push_back(next);
      if (i + 1 < steps) model.forward(*cache, std::span<const int32_t>(&next, 1), logits.data(), false);
    }
    return generated;
  }
  Reference ref_;
  std::unique_ptr<Model> model_;
  int64_t vocab_ = 0;
  float scale_ = 0.0f;
};

TEST_P(GoldenFpQuant, PromptLogitsMatchDequantizedTransformers) {
  auto cache = model_->new_cache(static_cast<int64_t>(ref_.prompt.size()));
  std::vector<float> logits(ref_.logits.size());
  model_->forward(*cache, ref_.prompt, logits.data(), /*all_logits=*/true);
  const float err = max_err(logits.data(), ref_.logits.data(), logits.size());
  std::printf("[ golden   ] %-16s max|ref|=%.3f max_err=%.3e (rel %.2e)\n", GetParam().c_str(), scale_, err,
              err / scale_);
  EXPECT_LE(err, 1e-4f * scale_);
}

TEST_P(GoldenFpQuant, GreedyMatchesAndChunkedPrefillAgrees) {
  EXPECT_EQ(greedy_in_two_chunks(*model_, 1e-4f), ref_.greedy);
}

// The default NVFP4 path quantizes activations to int8 per block of 32 (LoadOptions). That
// rounding (half of 1/127 of a block's largest activation) is far below NVFP4's own weight
// rounding (steps of 1/12 to 1/3 of a group's largest weight), so the logits stay within a few
// percent of the reference and greedy decoding agrees. Where the reference also simulated that
// rounding (qwen3_5_mixed, whose 32-wide rows make it coarse: 7.7% of max|logit| there), the
// path is held to it as tightly as the exact path is to the plain reference.
TEST_P(GoldenFpQuant, IntegerActivationsStayNearTheReference) {
  const auto fast = Model::load((kFixtures / GetParam()).string(), {.load_tokenizer = false});
  std::vector<float> logits(ref_.logits.size());
  auto cache = fast->new_cache(static_cast<int64_t>(ref_.prompt.size()));
  fast->forward(*cache, ref_.prompt, logits.data(), /*all_logits=*/true);
  const float err = max_err(logits.data(), ref_.logits.data(), logits.size());
  std::printf("[ int8 act ] %-16s max_err=%.3e (rel %.2e)\n", GetParam().c_str(), err, err / scale_);
  if (ref_.logits_int8_act.empty()) {
    EXPECT_LE(err, 3e-2f * scale_);
  } else {
    ASSERT_EQ(ref_.logits_int8_act.size(), logits.size());
    const float sim = max_err(logits.data(), ref_.logits_int8_act.data(), logits.size());
    std::printf("[ int8 act ] %-16s vs the simulated rounding: max_err=%.3e (rel %.2e)\n", GetParam().c_str(), sim,
                sim / scale_);
    EXPECT_LE(sim, 1e-4f * scale_);
  }
  EXPECT_EQ(greedy_in_two_chunks(*fast, 3e-2f), ref_.greedy);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenFpQuant,
                         ::testing::Values("qwen3_nvfp4", "qwen3_fp8", "qwen3_fp8_block", "qwen3_mixed",
                                           "qwen3_moe_mixed",  // tools/make_moe_fixtures.py
                                           "qwen3_5_mixed"));  // tools/make_hybrid_fixtures.py

// A fixture whose hf_quant_config.json is rewritten; returns the load error ("" if none).
std::string load_with_quant_config(const std::string& fixture, const nlohmann::json& quantization) {
  const std::string dir = testing_io::temp_path(fixture);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kFixtures / fixture)) fs::copy(e.path(), dir + "/" + e.path().filename().string());
  testing_io::write_file(dir + "/hf_quant_config.json", nlohmann::json{{"quantization", quantization}}.dump());
  try {
    Model::load(dir, {.n_threads = 1, .load_tokenizer = false});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GoldenFpQuantErrors, ModelLoadNamesTheTensor) {
  if (!fs::exists(kFixtures / "qwen3_nvfp4")) GTEST_SKIP() << "fixture absent";
  // NVFP4 codes under an FP8 declaration.
  std::string err = load_with_quant_config("qwen3_nvfp4", {{"quant_algo", "FP8"}, {"exclude_modules", {"lm_head"}}});
  EXPECT_NE(err.find("model.layers.0.mlp.down_proj.weight: stored as U8"), std::string::npos) << err;
  err = load_with_quant_config("qwen3_nvfp4", {{"quant_algo", "NVFP4"}, {"group_size", 8}});
  EXPECT_NE(err.find("group_size must be 16"), std::string::npos) << err;
  // lm_head is BF16 whether or not exclude_modules lists it.
  err = load_with_quant_config("qwen3_nvfp4", {{"quant_algo", "NVFP4"}, {"group_size", 16}, {"exclude_modules", nlohmann::json::array()}});
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace zen

namespace zen {
namespace {

// Block formats are packed for matmul, not for row lookups; a tied lm_head packs on demand,
// and the packed product equals the dequantized rows' dot products.
TEST(LinearBind, PacksForMatmulNotForRowLookups) {
  testing_io::GgufBuilder b;
  b.add_string("general.architecture", "qwen3");
  b.add_tensor("token_embd.weight", {64, 24}, testing_io::kGgmlQ8_0);
  const std::string path = testing_io::temp_path("packed_linear.gguf");
  testing_io::write_file(path, b.build());
  auto ck = Checkpoint::open(path);
  const QuantConfig none;
  Linear rows = Linear::bind(*ck, "token_embd.weight", {24, 64}, none, Linear::Use::Rows);
  ASSERT_TRUE(rows.valid());
  EXPECT_EQ(rows.packed, nullptr);
  Linear head = rows;
  head.prepare_matmul(*ck);
  EXPECT_EQ(head.packed != nullptr, Linear::packing_enabled());

  std::vector<float> x(64), y(24), w(64);
  for (int i = 0; i < 64; ++i) x[static_cast<size_t>(i)] = std::sin(0.3f * static_cast<float>(i));
  ThreadPool pool(1);
  head.matmul(x.data(), 1, y.data(), pool);
  for (int64_t r = 0; r < 24; ++r) {
    rows.dequantize_row(r, w.data());  // still readable: its pages come back from the file
    double want = 0.0, mag = 0.0;
    for (int i = 0; i < 64; ++i) {
      want += static_cast<double>(w[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
      mag += std::fabs(static_cast<double>(w[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)]);
    }
    EXPECT_NEAR(y[static_cast<size_t>(r)], want, 1e-2 * mag + 1e-12) << "row " << r;  // x goes through Q8_0
  }
}

}  // namespace
}  // namespace zen
