// Rotary embedding at the far end of a 1M-position YaRN context (factor 4 over 262,144, as
// Zen6 ships) against transformers' Qwen3RotaryEmbedding (tools/make_rope_fixtures.py).
//
// Precision: transformers (and vLLM, llama.cpp) form the angle pos * inv_freq as ONE f32
// product. Near pos = 2^20 that product's rounding alone moves the angle by up to
// pos * inv_freq * 2^-24 (about 0.03 rad for the lower frequencies), so cos/sin of the f32
// angle differ from cos/sin of the exact (float64) angle by up to ~3e-2. The engine
// reproduces the reference's f32 angle (Rope::angles) and evaluates cos/sin of it in double,
// so, given the same inv_freq, it matches transformers to the rounding of cos/sin themselves:
// kCosSinTolerance (a few f32 ulps of values <= the attention factor 1.139). A double-
// precision angle would be "more exact" but would disagree with the reference the model runs
// against by 3e-2; DriftFromFloat64Angles bounds that drift instead of hiding it.
// inv_freq itself: transformers computes base ** (2i/d) with torch's vectorised f32 pow,
// which is not correctly rounded (for theta 1e6, d 128, i = 37 it is 1 ulp below the
// correctly rounded value that std::pow and torch's own scalar path give). So inv_freq is
// required within 1 ulp, and cos/sin within kCosSinTolerance plus what that inv_freq
// difference does to the angle: pos * |inv_ours - inv_ref| * attention_factor (<= 4e-5 at
// pos 2^20; a GPU reference would differ from the CPU one in the same way).
#include "model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/mmap.h"
#include "io/safetensors.h"
#include "kernels/cpu/ops.h"

namespace zen {
namespace {

namespace fs = std::filesystem;
const fs::path kRopeFixtures = fs::path(ZEN_SOURCE_DIR) / "tests/fixtures/rope";
constexpr float kCosSinTolerance = 1e-6f;

struct RopeFixture {
  ModelConfig cfg;
  std::vector<int64_t> positions;  // [P]
  std::vector<float> inv_freq;     // [D/2]
  std::vector<float> cos, sin;     // [P, D/2]
};

template <typename T>
std::vector<T> read(const SafetensorsFile& f, const std::string& name) {
  for (const TensorView& t : f.tensors())
    if (t.name == name) {
      std::vector<T> out(t.nbytes / sizeof(T));
      std::memcpy(out.data(), t.data, t.nbytes);
      return out;
    }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

RopeFixture load(const std::string& name) {
  RopeFixture f;
  f.cfg = ModelConfig::from_hf(nlohmann::json::parse(read_text_file((kRopeFixtures / (name + ".config.json")).string())));
  SafetensorsFile file((kRopeFixtures / (name + ".safetensors")).string());
  f.positions = read<int64_t>(file, "positions");
  f.inv_freq = read<float>(file, "inv_freq");
  f.cos = read<float>(file, "cos");
  f.sin = read<float>(file, "sin");
  return f;
}

class YarnMillion : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { fx_ = load(GetParam()); }
  RopeFixture fx_;
};

TEST_P(YarnMillion, ConfigReachesOneMillionPositions) {
  EXPECT_EQ(fx_.cfg.rope_scaling, RopeScaling::Yarn);
  EXPECT_EQ(static_cast<double>(fx_.cfg.rope_original_max_position) * fx_.cfg.rope_factor,
            static_cast<double>(fx_.cfg.max_position_embeddings));
  EXPECT_EQ(fx_.positions.back() + 1, fx_.cfg.max_position_embeddings);
}

// Within one ulp (see the header comment).
TEST_P(YarnMillion, InverseFrequenciesWithinOneUlpOfTransformers) {
  const Rope rope(fx_.cfg);
  ASSERT_EQ(rope.inv_freq().size(), fx_.inv_freq.size());
  int differing = 0;
  for (size_t i = 0; i < fx_.inv_freq.size(); ++i) {
    const float ref = fx_.inv_freq[i], ours = rope.inv_freq()[i];
    differing += ours != ref ? 1 : 0;
    EXPECT_TRUE(ours == ref || ours == std::nextafter(ref, 0.0f) || ours == std::nextafter(ref, 1.0f))
        << "i " << i << ": " << ours << " vs " << ref;
  }
  std::printf("[ rope     ] %-18s inv_freq: %d of %zu differ by one ulp\n", GetParam().c_str(), differing,
              fx_.inv_freq.size());
}

TEST_P(YarnMillion, CosSinMatchTransformersNearTheEnd) {
  const Rope rope(fx_.cfg);
  const size_t half = fx_.inv_freq.size();
  std::vector<float> c(half), s(half);
  const double factor = rope.attention_factor();
  double worst = 0.0, worst_same_freq = 0.0;
  for (size_t p = 0; p < fx_.positions.size(); ++p) {
    const int64_t pos = fx_.positions[p];
    rope.angles(pos, c.data(), s.data());
    for (size_t i = 0; i < half; ++i) {
      const double freq_gap = std::fabs(static_cast<double>(rope.inv_freq()[i]) - fx_.inv_freq[i]);
      const double err = std::max(std::fabs(c[i] - fx_.cos[p * half + i]), std::fabs(s[i] - fx_.sin[p * half + i]));
      EXPECT_LE(err, kCosSinTolerance + factor * static_cast<double>(pos) * freq_gap) << "pos " << pos << " i " << i;
      worst = std::max(worst, err);
      if (freq_gap == 0.0) worst_same_freq = std::max(worst_same_freq, err);
    }
  }
  std::printf("[ rope     ] %-18s %zu positions up to %lld: max |ours - transformers| = %.3e (%.3e where inv_freq "
              "agrees)\n",
              GetParam().c_str(), fx_.positions.size(), static_cast<long long>(fx_.positions.back()), worst,
              worst_same_freq);
}

// The reference's f32 angle drifts from the exact angle by at most its own rounding:
// |cos(fl(p*f)) - cos(p*f)| <= |fl(p*f) - p*f| <= p*f*2^-24 (+ cos/sin rounding).
TEST_P(YarnMillion, DriftFromFloat64AnglesIsTheF32Rounding) {
  const Rope rope(fx_.cfg);
  const size_t half = fx_.inv_freq.size();
  const double factor = rope.attention_factor();
  std::vector<float> c(half), s(half);
  double worst = 0.0;
  for (int64_t pos : fx_.positions) {
    rope.angles(pos, c.data(), s.data());
    for (size_t i = 0; i < half; ++i) {
      const double exact = static_cast<double>(pos) * static_cast<double>(rope.inv_freq()[i]);
      const double bound = exact * std::ldexp(1.0, -24) + 1e-6;
      const double drift = std::max(std::fabs(c[i] / factor - std::cos(exact)), std::fabs(s[i] / factor - std::sin(exact)));
      worst = std::max(worst, drift);
      EXPECT_LE(drift, bound) << "pos " << pos << " i " << i;
    }
  }
  std::printf("[ rope     ] %-18s max |cos/sin(f32 angle) - cos/sin(f64 angle)| = %.3e\n", GetParam().c_str(), worst);
}

// Rotated vectors keep their norm (times the attention factor) and attention over keys
// spread across the last 1,024 positions and the whole window stays finite and normalised.
TEST_P(YarnMillion, AttentionStaysFiniteAndNormalised) {
  const ModelConfig& cfg = fx_.cfg;
  const Rope rope(cfg);
  const int64_t hd = cfg.head_dim, half = hd / 2;
  const int64_t last = cfg.max_position_embeddings - 1;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(hd), c(half), s(half);
  for (float& v : q) v = normal(rng);
  const float q_norm = std::sqrt(kernels::dot_f32(q.data(), q.data(), hd));
  rope.angles(last, c.data(), s.data());
  rope.apply(q.data(), 1, hd, c.data(), s.data());
  const float factor = rope.attention_factor();
  EXPECT_NEAR(std::sqrt(kernels::dot_f32(q.data(), q.data(), hd)), factor * q_norm, 1e-5f * factor * q_norm);

  std::vector<int64_t> key_pos;
  for (int64_t j = 0; j < 1024; ++j) key_pos.push_back(last - j);
  for (int64_t p : {int64_t{0}, int64_t{1}, cfg.rope_original_max_position, last / 2}) key_pos.push_back(p);
  std::vector<float> scores;
  for (int64_t p : key_pos) {
    std::vector<float> k(hd);
    for (float& v : k) v = normal(rng);
    rope.angles(p, c.data(), s.data());
    rope.apply(k.data(), 1, hd, c.data(), s.data());
    scores.push_back(kernels::dot_f32(q.data(), k.data(), hd) / std::sqrt(static_cast<float>(hd)));
  }
  kernels::softmax_inplace(scores.data(), static_cast<int64_t>(scores.size()));
  double sum = 0.0;
  for (float w : scores) {
    ASSERT_TRUE(std::isfinite(w));
    ASSERT_GE(w, 0.0f);
    sum += w;
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, YarnMillion, ::testing::Values("yarn1m_rotary64", "yarn1m_qwen3_128"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace zen
