// DFlash block drafter (z-lab's DFlash; PyPI `dflash` is the reference): a few Qwen3-style
// decoder layers that draft a whole block of tokens in one forward, conditioned on the
// target's hidden states, with no embedding table or output head of their own.
//   context: c = hidden_norm(fc(the target's residual stream after its tap layers,
//            concatenated)) for each committed position; each draft layer keeps
//            RoPE(k_norm(k_proj(c))) and v_proj(c) as its only persistent K/V.
//   block:   the anchor (the last sampled token) and B - 1 mask tokens at positions
//            start .. start + B - 1, embedded by the target's embedding; each layer attends
//            over the context's K/V and the block's own. Sliding layers are causal within
//            their window; full layers see the whole block (bidirectional), as trained.
//   drafts:  rows 1 .. B - 1 after the final norm, through the target's output head.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/rope.h"

namespace zen::spec::dflash {

struct DrafterConfig {
  ModelConfig decoder;                     // the draft layers (qwen3 shape; vocab = the target's)
  std::vector<int32_t> target_layer_ids;   // target layers whose output residual stream is tapped
  int32_t mask_token_id = -1;
  int64_t block_size = 16;                 // anchor + block_size - 1 drafted tokens
  std::vector<bool> causal;                // per draft layer
  float input_embedding_scale = 1.0f, output_multiplier = 1.0f, logit_softcap = 0.0f;

  // config.json of a drafter folder (dflash_config, or the same keys at the top level).
  static DrafterConfig from_json(const nlohmann::json& root);
  // Throws zen::Error with the numbers when the drafter does not fit the target.
  void check_fits(const ModelConfig& target) const;
  int64_t tap_width() const { return static_cast<int64_t>(target_layer_ids.size()) * decoder.hidden_size; }
  // Draft K/V bytes (f32) per context position, summed over the full layers, and the fixed
  // bytes the sliding layers hold at most (window - 1 positions each).
  int64_t kv_bytes_per_token() const;
  int64_t kv_bytes_sliding() const;
};

// One sequence's draft state: per layer, the context K/V of positions first[l] .. length - 1
// (a sliding layer keeps only the window - 1 latest, all a later block can see; a full layer
// keeps them all).
struct DraftContext {
  int64_t length = 0;
  std::vector<int64_t> first;            // [layer]
  std::vector<int64_t> window;           // [layer] 0: full
  std::vector<std::vector<float>> k, v;  // [layer][length - first, kv_heads * head_dim]
};

class Drafter {
 public:
  // Loads a drafter folder (config.json + safetensors) strictly, for this target.
  static std::unique_ptr<Drafter> load(const std::string& folder, Model& target);

  const DrafterConfig& config() const { return cfg_; }
  // Appends n context positions: taps [n, tap_width()] (ForwardBatch::taps rows).
  void extend(DraftContext& ctx, const float* taps, int64_t n) const;
  // Forgets context positions from `length` on (rejected drafts' rows never enter, so only
  // a caller's own bookkeeping needs this); a sliding layer that already dropped positions
  // before `length`'s window cannot go back, and throws.
  static void truncate(DraftContext& ctx, int64_t length);
  // Drafts one block at positions ctx.length .. ctx.length + block.size() - 1: block =
  // [anchor, mask ...]; logits: [block.size() - 1, vocab], one row per drafted position.
  void draft(const DraftContext& ctx, std::span<const int32_t> block, float* logits) const;

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;  // [H], [H], [hd], [hd]
    Linear wq, wk, wv, wo;                                   // [nh*hd, H], [nkv*hd, H] x2, [H, nh*hd]
    Linear gate, up, down;                                   // [I, H], [I, H], [H, I]
  };
  Drafter(std::unique_ptr<Checkpoint> ckpt, DrafterConfig cfg, Model& target);
  void attention(int layer, const DraftContext& ctx, const float* x, int64_t n, float* out) const;
  void mlp(const Layer& L, const float* x, int64_t n, float* out) const;

  std::unique_ptr<Checkpoint> ckpt_;
  DrafterConfig cfg_;
  Model& target_;
  Rope rope_;
  Linear fc_;                                   // [H, n_taps * H]
  std::vector<float> hidden_norm_, final_norm_; // [H]
  std::vector<Layer> layers_;
};

}  // namespace zen::spec::dflash
