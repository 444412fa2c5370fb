// The DFlash drafter against the reference package (tools/make_dflash_fixtures.py): the
// target's tapped hidden states, then, step by step through a whole greedy dflash_generate, the
// draft logits of each block from the same context rows. A twin whose sliding layers are
// declared full drafts differently (the window and causality are seen). A drafter that does not
// fit its target is refused with the numbers.
#include "spec/dflash/drafter.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "base/mmap.h"
#include "base/test_compare.h"
#include "io/safetensors.h"
#include "spec/dflash/reference_test_util.h"
#include "kernels/cpu/packed.h"

namespace zen::spec::dflash {
namespace {

namespace fs = std::filesystem;
using test_reference::kDir;
using test_reference::tensor;

class DFlashV1 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    target_ = Model::load((kDir / "target").string(), {.n_threads = 2, .load_tokenizer = false}).release();
    ref_ = new SafetensorsFile((kDir / "v1.reference.safetensors").string());
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete target_;
  }
  static float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    return max_diff(a, b);
  }
  static Model* target_;
  static SafetensorsFile* ref_;
};
Model* DFlashV1::target_ = nullptr;
SafetensorsFile* DFlashV1::ref_ = nullptr;

TEST_F(DFlashV1, LoadsWithItsShape) {
  auto drafter = Drafter::load((kDir / "v1").string(), *target_);
  const DrafterConfig& c = drafter->config();
  EXPECT_EQ(c.target_layer_ids, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(c.block_size, 4);
  EXPECT_EQ(c.mask_token_id, 287);
  EXPECT_EQ(c.causal, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(c.decoder.attention_windows, (std::vector<int64_t>{5, 5, 0}));
  EXPECT_EQ(c.kv_bytes_per_token(), 2 * 2 * 16 * 4);      // the full layer
  EXPECT_EQ(c.kv_bytes_sliding(), 2 * 4 * 2 * 2 * 16 * 4);  // two sliding layers, 4 positions each
  auto full = Drafter::load((kDir / "v1_full").string(), *target_);
  EXPECT_EQ(full->config().causal, (std::vector<bool>{false, false, false}));
  EXPECT_TRUE(full->config().decoder.attention_windows.empty());
}

// The residual stream after target layers 1 and 3, for every prompt token.
TEST_F(DFlashV1, TargetTapsMatchTheReference) {
  const auto prompt = tensor<int32_t>(*ref_, "prompt");
  const auto want = tensor<float>(*ref_, "prompt_taps");
  KvPool kv(target_->config(), 4);
  const std::vector<int32_t> blocks{0, 1, 2, 3};
  SeqSlice slice;
  slice.tokens = prompt;
  slice.blocks = blocks;
  ForwardBatch batch;
  batch.kv = &kv;
  batch.seqs = std::span<const SeqSlice>(&slice, 1);
  const std::vector<int32_t> taps{1, 3};
  std::vector<float> got(want.size());
  batch.tap_layers = taps;
  batch.taps = got.data();
  std::vector<float> logits(static_cast<size_t>(target_->config().vocab_size));
  target_->forward(batch, logits.data());
  EXPECT_LT(max_abs_diff(got, want), 1e-4f);
}

// Every block of the reference's greedy generation: the same context rows in, the same draft
// logits out (f32 against f32; differences are summation order).
TEST_F(DFlashV1, EveryBlockOfAGenerationMatchesTheReference) {
  auto drafter = Drafter::load((kDir / "v1").string(), *target_);
  const int32_t steps = tensor<int32_t>(*ref_, "num_steps")[0];
  ASSERT_GT(steps, 10);
  DraftContext ctx;
  for (int32_t s = 0; s < steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const std::string p = "step" + std::to_string(s) + ".";
    std::vector<int64_t> shape;
    const auto taps = tensor<float>(*ref_, p + "ctx_taps", &shape);
    ASSERT_EQ(tensor<int32_t>(*ref_, p + "ctx_start")[0], ctx.length);
    drafter->extend(ctx, taps.data(), shape[0]);
    ASSERT_EQ(tensor<int32_t>(*ref_, p + "start")[0], ctx.length);
    const auto block = tensor<int32_t>(*ref_, p + "block");
    const auto want = tensor<float>(*ref_, p + "draft_logits");
    std::vector<float> got(want.size());
    drafter->draft(ctx, block, got.data());
    EXPECT_LT(max_abs_diff(got, want), 2e-4f);
    const auto drafts = tensor<int32_t>(*ref_, p + "drafts");
    const int64_t V = drafter->config().decoder.vocab_size;
    for (size_t i = 0; i < drafts.size(); ++i)
      EXPECT_EQ(std::max_element(got.begin() + static_cast<ptrdiff_t>(i) * V, got.begin() + static_cast<ptrdiff_t>(i + 1) * V) -
                    (got.begin() + static_cast<ptrdiff_t>(i) * V),
                drafts[i]);
  }
}

// Declared full, the same weights draft differently: the window and causality are seen.
TEST_F(DFlashV1, TheFullTwinDraftsDifferently) {
  auto full = Drafter::load((kDir / "v1_full").string(), *target_);
  std::vector<int64_t> shape;
  const auto taps = tensor<float>(*ref_, "step0.ctx_taps", &shape);
  DraftContext ctx;
  full->extend(ctx, taps.data(), shape[0]);
  const auto block = tensor<int32_t>(*ref_, "step0.block");
  const auto want = tensor<float>(*ref_, "full.step0.draft_logits");
  std::vector<float> got(want.size());
  full->draft(ctx, block, got.data());
  EXPECT_LT(max_abs_diff(got, want), 2e-4f);
  EXPECT_GT(max_abs_diff(got, tensor<float>(*ref_, "step0.draft_logits")), 1.0f);
}

// A sliding layer holds window - 1 positions whatever the context length; a full one all.
TEST_F(DFlashV1, SlidingLayersHoldTheirWindowOnly) {
  auto drafter = Drafter::load((kDir / "v1").string(), *target_);
  std::vector<int64_t> shape;
  const auto taps = tensor<float>(*ref_, "step0.ctx_taps", &shape);
  DraftContext ctx;
  drafter->extend(ctx, taps.data(), shape[0]);
  drafter->extend(ctx, taps.data(), shape[0]);
  const size_t row = 2 * 16;
  EXPECT_EQ(ctx.k[0].size(), 4 * row);
  EXPECT_EQ(ctx.first[0], 2 * shape[0] - 4);
  EXPECT_EQ(ctx.k[2].size(), static_cast<size_t>(2 * shape[0]) * row);
  EXPECT_THROW(Drafter::truncate(ctx, 3), Error);  // layer 0 dropped position 3 long ago
  EXPECT_THROW(Drafter::truncate(ctx, 2 * shape[0] - 1), Error);  // would need position 2n - 5
  Drafter::truncate(ctx, 2 * shape[0]);                             // a no-op
}

TEST_F(DFlashV1, RollbackForgetsContextRows) {
  auto drafter = Drafter::load((kDir / "v1_full").string(), *target_);
  std::vector<int64_t> shape;
  const auto taps = tensor<float>(*ref_, "step0.ctx_taps", &shape);
  DraftContext whole, cut;
  drafter->extend(whole, taps.data(), shape[0]);
  drafter->extend(cut, taps.data(), shape[0]);
  drafter->extend(cut, taps.data(), 3);  // three rows that a rejection takes back
  Drafter::truncate(cut, shape[0]);
  EXPECT_EQ(cut.length, whole.length);
  EXPECT_EQ(cut.k, whole.k);
  EXPECT_EQ(cut.v, whole.v);
}

TEST_F(DFlashV1, AMisfitIsRefusedWithTheNumbers) {
  auto c = DrafterConfig::from_json(nlohmann::json::parse(read_text_file((kDir / "v1/config.json").string())));
  auto expect_refused = [&](DrafterConfig bad, const std::string& words) {
    try {
      bad.check_fits(target_->config(), target_->config().num_layers);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  DrafterConfig bad = c;
  bad.decoder.hidden_size = 64;
  expect_refused(bad, "hidden_size 64 does not fit the target's 32");
  bad = c;
  bad.target_layer_ids = {1, 6};
  expect_refused(bad, "target_layer_ids entry 6 is outside the target's 6 layers");
  bad = c;
  bad.mask_token_id = 288;
  expect_refused(bad, "mask_token_id 288 is outside the target's vocabulary of 288");
  bad = c;
  bad.decoder.vocab_size = 1000;
  expect_refused(bad, "vocab_size 1000 does not fit the target's 288");
  nlohmann::json v2 = nlohmann::json::parse(read_text_file((kDir / "v1/config.json").string()));
  v2["dflash_config"]["conv_kernel_size"] = 2;  // DFlash 2 needs all four of its keys
  EXPECT_THROW(DrafterConfig::from_json(v2), Error);
}

}  // namespace
}  // namespace zen::spec::dflash

namespace zen::spec::dflash {
namespace {

// DFlash 2 (tools/make_dflash2_fixtures.py): every block of the reference's greedy generation
// gives the reference's final hidden rows and logits (through the dynamic convolutions), and
// the candidate selector walks the reference's path, which differs from the logits' argmax at
// most positions.
TEST(DFlashV2, EveryBlockAndSelectedPathMatchTheReference) {
  auto target = Model::load((kDir / "target").string(), {.n_threads = 2, .load_tokenizer = false});
  const SafetensorsFile ref((kDir / "v2.reference.safetensors").string());
  auto drafter = Drafter::load((kDir / "v2").string(), *target);
  const DrafterConfig& c = drafter->config();
  ASSERT_TRUE(c.v2());
  EXPECT_EQ(c.conv_kernel, 2);
  EXPECT_EQ(c.conv_group, 8);
  EXPECT_EQ(c.selector_top_k, 8);
  EXPECT_EQ(c.selector_rank, 4);
  const int32_t steps = tensor<int32_t>(ref, "num_steps")[0];
  DraftContext ctx;
  int differs_from_argmax = 0;
  for (int32_t s = 0; s < steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const std::string p = "step" + std::to_string(s) + ".";
    std::vector<int64_t> shape;
    const auto taps = tensor<float>(ref, p + "ctx_taps", &shape);
    ASSERT_EQ(tensor<int32_t>(ref, p + "ctx_start")[0], ctx.length);
    drafter->extend(ctx, taps.data(), shape[0]);
    const auto block = tensor<int32_t>(ref, p + "block");
    const auto want_logits = tensor<float>(ref, p + "draft_logits");
    const auto want_hidden = tensor<float>(ref, p + "draft_hidden");
    std::vector<float> logits(want_logits.size()), hidden(want_hidden.size());
    const BlockJob job{ContextView{.length = ctx.length, .ctx = &ctx}, block};
    drafter->draft(std::span<const BlockJob>(&job, 1), logits.data(), nullptr, hidden.data());
    float worst = 0;
    for (size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, std::abs(logits[i] - want_logits[i]));
    EXPECT_LT(worst, 2e-4f);
    worst = 0;
    for (size_t i = 0; i < hidden.size(); ++i) worst = std::max(worst, std::abs(hidden[i] - want_hidden[i]));
    EXPECT_LT(worst, 2e-4f);
    const int64_t rows = static_cast<int64_t>(block.size()) - 1;
    auto greedy = [](std::span<const float> scores, std::span<const int32_t>, int64_t) {
      return static_cast<size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
    };
    const auto path = drafter->select(hidden.data(), logits.data(), rows, block[0], greedy);
    EXPECT_EQ(path, tensor<int32_t>(ref, p + "drafts"));
    const auto argmax = tensor<int32_t>(ref, p + "argmax");
    for (size_t i = 0; i < argmax.size(); ++i) differs_from_argmax += argmax[i] != path[i];
  }
  EXPECT_GT(differs_from_argmax, 10);  // the selector is seen
}

}  // namespace
}  // namespace zen::spec::dflash


namespace zen::spec::dflash {
namespace {

// quantization q8_0: the drafter's matrices requantized for the int8 kernels draft nearly the
// same logits (not the same: the requantization is real).
TEST(DFlashQ8, RequantizedDrafterDraftsNearlyTheSame) {
  if (!kernels::PackedMatrix::available() || !kernels::PackedMatrix::supports(DType::Q8_0))
    GTEST_SKIP() << "no int8 kernels on this CPU";
  auto target = Model::load((kDir / "target").string(), {.n_threads = 2, .load_tokenizer = false});
  const SafetensorsFile ref((kDir / "v1.reference.safetensors").string());
  auto exact = Drafter::load((kDir / "v1").string(), *target);
  auto q8 = Drafter::load((kDir / "v1").string(), *target, /*q8_0=*/true);
  std::vector<int64_t> shape;
  const auto taps = tensor<float>(ref, "step0.ctx_taps", &shape);
  DraftContext a, b;
  exact->extend(a, taps.data(), shape[0]);
  q8->extend(b, taps.data(), shape[0]);
  const auto block = tensor<int32_t>(ref, "step0.block");
  std::vector<float> la(3 * 288), lb(la.size());
  exact->draft(a, block, la.data());
  q8->draft(b, block, lb.data());
  float worst = 0, scale = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    worst = std::max(worst, std::abs(la[i] - lb[i]));
    scale = std::max(scale, std::abs(la[i]));
  }
  EXPECT_GT(worst, 0.0f);
  EXPECT_LT(worst, 0.1f * scale) << "largest logit " << scale;
}

}  // namespace
}  // namespace zen::spec::dflash
