// Hybrid decoder of Qwen3-Next and Qwen3.5 / Zen6 (text part): Gated DeltaNet layers
// (model/gated_delta_net.h) interleaved with gated full attention, per the config's
// layer_types. Pre-norm blocks with zero-centred RMSNorm gains (x * (1 + w)):
//   x += mixer(n(x));  x += mlp(n(x))   (sparse layers: a mixture of experts with a shared
//   expert, model/moe.h: qwen3_next, qwen3_5_moe)
// Gated attention: q_proj yields [query | gate] per head; q_norm / k_norm; rotary on the
// first head_dim * partial_rotary_factor entries; attn * sigmoid(gate) before o_proj.
// Recurrent state per sequence lives in StatePool slots: per linear layer the conv window
// then the delta-rule state (GdnShape::state_floats each, in layer order).
#pragma once
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "model/attention.h"
#include "model/gated_delta_net.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/rope.h"

namespace zen {

struct GatedAttentionWeights {
  Linear wq;  // [nh * 2 * hd, H]: per head [query (hd) | gate (hd)]
  Linear wk;  // [nkv * hd, H]
  Linear wv;  // [nkv * hd, H]
  Linear wo;  // [H, nh * hd]
  std::vector<float> q_norm, k_norm;  // [hd] as 1 + w
};

struct HybridLayer {
  bool linear = false;           // GDN (else gated full attention)
  int64_t state_offset = 0;      // GDN: floats into a state slot
  std::vector<float> attn_norm;  // [H] as 1 + w
  GdnWeights gdn;
  GatedAttentionWeights attn;
  std::vector<float> ffn_norm;  // [H] as 1 + w
  Linear w_gate;  // [I, H]   dense layers
  Linear w_up;    // [I, H]
  Linear w_down;  // [H, I]
  bool sparse = false;  // ModelConfig::is_sparse_layer: the MLP is `moe` (model/moe.h)
  MoeWeights moe;
};

class HybridModel final : public Model {
 public:
  HybridModel(std::unique_ptr<Checkpoint> ckpt, ModelConfig cfg, std::unique_ptr<Tokenizer> tok, int n_threads,
              bool strict);

  const ModelConfig& config() const override { return cfg_; }
  const Tokenizer* tokenizer() const override { return tok_.get(); }
  const Checkpoint& checkpoint() const override { return *ckpt_; }
  ThreadPool& pool() override { return pool_; }
  void attach_tokenizer(std::unique_ptr<Tokenizer> tok) override { tok_ = std::move(tok); }
  using Model::forward;
  void forward(const ForwardBatch& batch, float* logits) override;

  // Tests and benchmarks: run prefill through the recurrent form too.
  void set_gdn_mode(GdnMode mode) { gdn_mode_ = mode; }

 private:
  void bind_weights(bool strict);
  void attention_block(const HybridLayer& L, int layer, const ForwardBatch& batch);
  void linear_block(const HybridLayer& L, const ForwardBatch& batch);
  void mlp_block(const HybridLayer& L, int64_t n);
  void ensure_buffers(int64_t n);
  void prepare_states(const ForwardBatch& batch);

  std::unique_ptr<Checkpoint> ckpt_;
  ModelConfig cfg_;
  GdnShape gdn_shape_;
  std::unique_ptr<Tokenizer> tok_;
  ThreadPool pool_;
  Rope rope_;
  Linear embed_;                   // [V, H]
  std::vector<HybridLayer> layers_;
  std::vector<float> final_norm_;  // [H] as 1 + w
  Linear lm_head_;                 // [V, H]
  bool complete_ = false;
  GdnMode gdn_mode_ = GdnMode::Auto;
  // Activation scratch, grown on demand.
  int64_t cap_tokens_ = 0;
  std::vector<float> x_, xn_, qg_, q_, k_, v_, attn_, gate_, up_, tmp_;  // [n, ...]
  std::vector<float> cos_, sin_;                                         // [n, rotary_dim/2]
  std::vector<float> scores_;
  GdnScratch gdn_scratch_;
  MoeScratch moe_scratch_;
  FlatBatch flat_;
};

}  // namespace zen
