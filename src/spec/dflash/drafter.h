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
// DFlash 2 adds, in every layer, a grouped dynamic causal convolution along the block before
// attention (on the normed input) and after it (on its output), the same around the MLP:
//   conv(x)[t, c] = sum over o < K, t - o >= 0 of (base[o, c] + dyn[t, o, group(c)]) x[t - o, c]
// with dyn = kernel_projection(the normed input at t) (one set for before, one for after);
// and drafts by a candidate selector: at each position the top-k logits' tokens, scored
//   unary + sum_r pred[previous token, r] x proj(hidden)[r] x succ[candidate, r]
// along the path from the anchor (greedy: the best; sampled: softmax(scores / T)).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/rope.h"
#include "spec/dflash/window_store.h"

namespace zen::spec::dflash {

struct DrafterConfig {
  ModelConfig decoder;                     // the draft layers (qwen3 shape; vocab = the target's)
  std::vector<int32_t> target_layer_ids;   // target layers whose output residual stream is tapped
  int32_t mask_token_id = -1;
  int64_t block_size = 16;                 // anchor + block_size - 1 drafted tokens
  std::vector<bool> causal;                // per draft layer
  float input_embedding_scale = 1.0f, output_multiplier = 1.0f, logit_softcap = 0.0f;
  // DFlash 2 (0: v1): grouped dynamic causal convolutions of conv_kernel taps around each
  // layer's attention and MLP, channels in groups of conv_group sharing a dynamic weight; a
  // candidate selector over each position's selector_top_k logits, scored in rank selector_rank.
  int64_t conv_kernel = 0, conv_group = 0, selector_top_k = 0, selector_rank = 0;
  bool v2() const { return conv_kernel > 0; }

  // config.json of a drafter folder (dflash_config, or the same keys at the top level).
  static DrafterConfig from_json(const nlohmann::json& root);
  // Throws zen::Error with the numbers when the drafter does not fit the target.
  void check_fits(const ModelConfig& target, int64_t target_layers) const;  // target_layers: Model::layer_count()
  int64_t tap_width() const { return static_cast<int64_t>(target_layer_ids.size()) * decoder.hidden_size; }
  // Draft K/V bytes (f32) per context position, summed over the full layers, and the fixed
  // bytes the sliding layers hold at most (window - 1 positions each).
  int64_t kv_bytes_per_token() const;
  int64_t kv_bytes_sliding() const;
  // The engine's stores: the full layers (sliding = false) or the sliding ones alone, as a
  // config of their own; store_index(l): layer l's index in its store; max_window(): the widest
  // sliding window (0: none).
  ModelConfig kv_config(bool sliding) const;
  int store_index(int64_t layer) const;
  int64_t max_window() const;
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

// Where one block's context K/V come from: positions 0 .. length - 1, held by a DraftContext
// (one sequence, contiguous) or by the engine's stores beside the target's KV, indexed by the
// target's own blocks through its block table (so prefix sharing and preemption carry over): a
// paged pool over the full layers (f32, the layout of the target's KvPool) and a WindowStore
// over the sliding ones, whose missing rows attention skips.
struct ContextView {
  int64_t length = 0;
  const DraftContext* ctx = nullptr;  // either this
  const KvPool* pool = nullptr;       // or this (the full layers, by store_index) ...
  const WindowStore* window = nullptr;  // ... and this (the sliding layers), with blocks
  std::span<const int32_t> blocks;
};

// One sequence's block: [anchor, mask ...] at positions context.length .. + block.size() - 1.
struct BlockJob {
  ContextView context;
  std::span<const int32_t> block;
  // Drafted rows wanted through the output head: rows 1 .. wanted (0: all block.size() - 1).
  // Every row still runs through the layers (full layers see the whole block), but the head,
  // a third of a block's cost at a 150k vocabulary, runs only where a draft will be verified.
  int64_t wanted = 0;
  int64_t drafts() const { return wanted > 0 ? std::min<int64_t>(wanted, static_cast<int64_t>(block.size()) - 1) : static_cast<int64_t>(block.size()) - 1; }
};

class Drafter {
 public:
  // Loads a drafter folder (config.json + safetensors) strictly, for this target.
  // q8_0: requantize its matrices to Q8_0 for the int8 kernels (Linear::requantize_q8_0).
  static std::unique_ptr<Drafter> load(const std::string& folder, Model& target, bool q8_0 = false);

  const DrafterConfig& config() const { return cfg_; }
  // Context K/V of n positions of any sequences: taps [n, tap_width()] (ForwardBatch::taps
  // rows), positions [n]; k, v: [layer][n, kv_heads * head_dim] (k normed and rotated).
  void context_kv(const float* taps, std::span<const int64_t> positions, std::vector<std::vector<float>>& k,
                  std::vector<std::vector<float>>& v) const;
  // Appends n context positions: taps [n, tap_width()] (ForwardBatch::taps rows).
  void extend(DraftContext& ctx, const float* taps, int64_t n) const;
  // Forgets context positions from `length` on (rejected drafts' rows never enter, so only
  // a caller's own bookkeeping needs this); a sliding layer that already dropped positions
  // before `length`'s window cannot go back, and throws.
  static void truncate(DraftContext& ctx, int64_t length);
  // Drafts one block at positions ctx.length .. ctx.length + block.size() - 1: block =
  // [anchor, mask ...]; logits: [block.size() - 1, vocab], one row per drafted position.
  void draft(const DraftContext& ctx, std::span<const int32_t> block, float* logits) const;
  // Several sequences' blocks in one forward (their rows batched through every matmul):
  // logits [sum of drafts(), vocab], the jobs' rows in order.
  // timing (optional): seconds in the draft layers (embedding included) and the output head.
  struct Timing {
    double layers = 0, head = 0;
  };
  // hidden (optional): the final-normed rows behind the logits [same rows, H] (the selector's).
  void draft(std::span<const BlockJob> jobs, float* logits, Timing* timing = nullptr, float* hidden = nullptr) const;
  // DFlash 2: the selector's path for one block: hidden [rows, H] and logits [rows, vocab] of
  // its drafted positions, the anchor token; choose(scores, candidates, position) returns the
  // index it takes (greedy: the best score; sampled: a draw from softmax(scores / T)).
  using Choose = std::function<size_t(std::span<const float> scores, std::span<const int32_t> candidates, int64_t pos)>;
  std::vector<int32_t> select(const float* hidden, const float* logits, int64_t rows, int32_t anchor,
                              const Choose& choose) const;

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;  // [H], [H], [hd], [hd]
    Linear wq, wk, wv, wo;                                   // [nh*hd, H], [nkv*hd, H] x2, [H, nh*hd]
    Linear gate, up, down;                                   // [I, H], [I, H], [H, I]
    // DFlash 2 convolutions around attention and MLP: base [2 (before, after), K, H];
    // kernel projection [2 x K x groups, H].
    std::vector<float> attn_base, mlp_base;
    Linear attn_kernel, mlp_kernel;
  };
  // One conv of x [rows, H] per job (causal along each block, never across jobs): dyn [rows,
  // 2 x K x groups] (which: 0 before, 1 after), base [K, H]; out may not alias x.
  void convolve(std::span<const BlockJob> jobs, const float* x, const float* dyn, int which, const float* base,
                float* out) const;
  Drafter(std::unique_ptr<Checkpoint> ckpt, DrafterConfig cfg, Model& target);
  // out [rows, H] = o_proj(attention of every job's block rows x [rows, H] (normed) over its
  // context K/V and its block's own, with the layer's mask).
  void attention(int layer, std::span<const BlockJob> jobs, const float* x, int64_t rows, float* out) const;
  void mlp(const Layer& L, const float* x, int64_t n, float* out) const;

  std::unique_ptr<Checkpoint> ckpt_;
  DrafterConfig cfg_;
  Model& target_;
  Rope rope_;
  Linear fc_;                                   // [H, n_taps * H]
  std::vector<float> hidden_norm_, final_norm_; // [H]
  // DFlash 2 selector: codebooks [V, r] for the previous token and the candidate; proj [r, H].
  std::vector<float> pred_codebook_, succ_codebook_;
  Linear selector_proj_;
  std::vector<Layer> layers_;
};

}  // namespace zen::spec::dflash
