// ModelConfig's checks run before anything is sized by the config: each absurd value is refused
// by name (a head_dim of 2^31 used to allocate gigabytes before the tensors refused the file).
#include "model/config.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "base/error.h"
#include "base/mmap.h"
#include "io/gguf.h"
#include "io/io_test_writers.h"

namespace zen {
namespace {

nlohmann::json fixture_config() {
  const auto path = std::filesystem::path(ZEN_SOURCE_DIR) / "tests/fixtures/models/qwen3_f32/config.json";
  return nlohmann::json::parse(read_text_file(path.string()));
}

TEST(ModelConfigLimits, AbsurdSizesAreRefusedByName) {
  EXPECT_NO_THROW(ModelConfig::from_hf(fixture_config()));
  const std::pair<const char*, int64_t> cases[] = {
      {"head_dim", int64_t{1} << 31},           {"num_attention_heads", 1 << 20},
      {"num_key_value_heads", 1 << 20},         {"intermediate_size", int64_t{1} << 40},
      {"max_position_embeddings", int64_t{1} << 40}, {"num_hidden_layers", 1 << 20},
      {"hidden_size", int64_t{1} << 40},        {"vocab_size", int64_t{1} << 40}};
  for (const auto& [key, value] : cases) {
    nlohmann::json j = fixture_config();
    j[key] = value;
    if (std::string(key) == "num_attention_heads") j["num_key_value_heads"] = value;  // keep the GQA ratio valid
    try {
      ModelConfig::from_hf(j);
      ADD_FAILURE() << key << " = " << value << " accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      const bool named = what.find(key) != std::string::npos || what.find("implausible") != std::string::npos;
      EXPECT_TRUE(named) << key << ": " << what;
    }
  }
}

// transformers' rule for Qwen2 / Qwen3 sliding windows: only with use_sliding_window, on the
// layers layer_types names or else from max_window_layers on (default 28).
TEST(ModelConfigSlidingWindow, FollowsTransformersRule) {
  auto with = [](nlohmann::json extra) {
    nlohmann::json j = fixture_config();
    j["num_hidden_layers"] = 4;
    j.erase("layer_types");
    for (auto& [k, v] : extra.items()) j[k] = v;
    return ModelConfig::from_hf(j);
  };
  using W = std::vector<int64_t>;
  EXPECT_EQ(with({{"sliding_window", 8}}).attention_windows, W{});  // use_sliding_window absent
  EXPECT_EQ(with({{"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 2}}).attention_windows,
            (W{0, 0, 8, 8}));
  EXPECT_EQ(with({{"use_sliding_window", true}, {"sliding_window", 8}}).attention_windows, W{});  // 28 > 4 layers
  EXPECT_EQ(with({{"use_sliding_window", true},
                  {"sliding_window", 8},
                  {"layer_types", {"sliding_attention", "full_attention", "sliding_attention", "full_attention"}}})
                .attention_windows,
            (W{8, 0, 8, 0}));
  EXPECT_EQ(with({{"use_sliding_window", true}, {"sliding_window", nullptr}, {"max_window_layers", 0}}).attention_windows,
            W{});
  EXPECT_EQ(with({{"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 0}}).attention_window(3), 8);
  for (const nlohmann::json& bad :
       {nlohmann::json{{"use_sliding_window", true}, {"sliding_window", -1}, {"max_window_layers", 0}},
        nlohmann::json{{"use_sliding_window", true}, {"sliding_window", 8}, {"layer_types", {"full_attention"}}},
        nlohmann::json{{"use_sliding_window", true},
                       {"sliding_window", 8},
                       {"layer_types", {"chunked_attention", "full_attention", "full_attention", "full_attention"}}}}) {
    try {
      with(bad);
      ADD_FAILURE() << bad.dump() << " accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("sliding_window") != std::string::npos || what.find("layer_types") != std::string::npos ||
                  what.find("layer type") != std::string::npos)
          << what;
    }
  }
}

// A dense GGUF whose rope.dimension_count is not its head_dim (partial rotary) is refused by
// name instead of being read as a full rotation.
// Each size within its own bound, the product beyond int64 parameter counts (3 x 2^62).
TEST(ModelConfigLimits, ImplausibleProductsOfPlausibleSizesAreRefused) {
  nlohmann::json j = fixture_config();
  j["model_type"] = "qwen3_moe";
  j["num_experts"] = 4096;
  j["num_experts_per_tok"] = 8;
  j["moe_intermediate_size"] = 1 << 20;
  j["hidden_size"] = 1 << 20;
  j["num_hidden_layers"] = 1024;
  try {
    ModelConfig::from_hf(j);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameters is implausible"), std::string::npos) << e.what();
  }
}

TEST(ModelConfigLimits, DenseGgufRotaryDimensionMustBeTheHeadDim) {
  auto config_of = [](uint32_t rot) {
    testing_io::GgufBuilder b;
    b.add_string("general.architecture", "qwen3");
    for (const auto& [key, value] : std::vector<std::pair<std::string, uint32_t>>{
             {"embedding_length", 64}, {"block_count", 2}, {"feed_forward_length", 64}, {"attention.head_count", 4},
             {"attention.head_count_kv", 2}, {"attention.key_length", 16}, {"rope.dimension_count", rot}})
      b.add_u32("qwen3." + key, value);
    b.add_strings("tokenizer.ggml.tokens", std::vector<std::string>(64, "t"));
    const std::string path = testing_io::temp_path("dense_rot.gguf");
    testing_io::write_file(path, b.build());
    return ModelConfig::from_gguf(GgufFile(path));
  };
  EXPECT_EQ(config_of(16).head_dim, 16);
  try {
    config_of(8);
    ADD_FAILURE() << "partial rotary accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope.dimension_count 8 differs from head_dim 16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zen
