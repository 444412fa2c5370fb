// Parameter counts from the config alone agree with the tensors the checkpoints really hold,
// for every fixture model (dense, MoE, hybrid); the sizes of the Zen6-shaped config follow
// from its layer schedule.
#include "model/footprint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "base/error.h"
#include "base/mmap.h"
#include "io/checkpoint.h"
#include "model/gated_delta_net.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
const fs::path kModels = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/models";

TEST(Footprint, ParameterCountMatchesCheckpointTensors) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(kModels)) {
    if (!entry.is_directory() || !fs::exists(entry.path() / "config.json") ||
        !fs::exists(entry.path() / "model.safetensors"))
      continue;
    auto ckpt = Checkpoint::open(entry.path().string());
    ModelConfig cfg;
    try {
      cfg = ModelConfig::from_hf(ckpt->hf_config());
    } catch (const Error&) {
      continue;  // architectures this count does not cover
    }
    const QuantConfig quant = QuantConfig::from_checkpoint(*ckpt);
    if (quant.algo != QuantAlgo::None || !quant.layers.empty()) continue;  // packed formats
    int64_t stored = 0;
    for (const std::string& name : ckpt->tensor_names()) {
      if (name.starts_with("model.visual.") || name.starts_with("mtp.") || name.ends_with("rotary_emb.inv_freq"))
        continue;  // not the decoder's (count_parameters covers the text decoder)
      stored += ckpt->peek(name)->numel();
    }
    EXPECT_EQ(count_parameters(cfg).total, stored) << entry.path().filename();
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST(Footprint, Zen6ShapedConfig) {
  const auto path = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/configs/zen6_shaped/config.json";
  const ModelConfig cfg = ModelConfig::from_hf(nlohmann::json::parse(read_text_file(path.string())));
  EXPECT_EQ(cfg.num_layers, 64);
  EXPECT_EQ(cfg.num_kv_layers(), cfg.num_layers / 4);
  for (int64_t l = 0; l < cfg.num_layers; ++l) EXPECT_EQ(cfg.is_full_attention(l), (l + 1) % 4 == 0) << l;
  EXPECT_EQ(kv_bytes_per_token_f32(cfg), 2 * cfg.num_kv_layers() * cfg.num_kv_heads * cfg.head_dim * 4);
  const GdnShape s = GdnShape::from_config(cfg);
  EXPECT_EQ(recurrent_state_bytes(cfg), cfg.num_linear_layers() * s.state_floats() * 4);
  EXPECT_EQ(cfg.rotary_dim(), 64);
  const ParameterCount p = count_parameters(cfg);
  EXPECT_EQ(p.total, p.active);  // dense MLPs
  EXPECT_GT(p.total, 20'000'000'000);
}

}  // namespace
}  // namespace zen
