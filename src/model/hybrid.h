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
#include <span>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "model/attention.h"
#include "model/gated_delta_net.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/mlp.h"
#include "model/rope.h"
#include "model/tp_runtime.h"

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
  FeedForward ffn;  // SwiGLU or MoE (model/mlp.h)
};

// Qwen3.5's multi-token-prediction head (mtp.* tensors), as vLLM's qwen3_5_mtp runs it:
//   x = fc([norm_e(embed(t_{i+1})); norm_h(h_i)])   h_i: the target's final-normed hidden state
//   x = decoder layer (gated full attention with its own KV, at position i; dense or MoE MLP)
//   logits = lm_head(norm(x))                       the target's lm_head
struct MtpWeights {
  Linear fc;                          // [H, 2H]
  std::vector<float> norm_embedding;  // [H] as 1 + w
  std::vector<float> norm_hidden;     // [H] as 1 + w
  std::vector<float> norm;            // [H] as 1 + w
  HybridLayer layer;                  // full attention
};

class HybridModel final : public Model {
 public:
  HybridModel(std::unique_ptr<Checkpoint> ckpt, ModelConfig cfg, std::unique_ptr<Tokenizer> tok,
              const LoadOptions& opts);

  const ModelConfig& config() const override { return cfg_; }
  const Tokenizer* tokenizer() const override { return tok_.get(); }
  const Checkpoint& checkpoint() const override { return *ckpt_; }
  ThreadPool& pool() override { return pool_; }
  void attach_tokenizer(std::unique_ptr<Tokenizer> tok) override { tok_ = std::move(tok); }
  using Model::forward;
  void forward(const ForwardBatch& batch, float* logits) override;
  void embed_rows(std::span<const int32_t> ids, float* out) const override;
  void output_head(const float* hidden, int64_t rows, float* logits) override;

  void serve_steps() override;
  int64_t layer_count() const override { return tp_.total_layers() > 0 ? tp_.total_layers() : cfg_.num_layers; }
  ~HybridModel() override;  // rank 0 of a tensor-parallel model releases the other ranks

  // Tests and benchmarks: run prefill through the recurrent form too.
  void set_gdn_mode(GdnMode mode) { gdn_mode_ = mode; }

  // The final-normed hidden states (the lm_head inputs) of the last forward's logit rows:
  // [logit rows, H]. Valid until the next forward.
  std::span<const float> final_hidden() const {
    return {xn_.data(), static_cast<size_t>(last_rows_ * cfg_.hidden_size)};
  }

  // MTP head. Status: "available (1 layer)", "unavailable (missing mtp.fc.weight)" (its other
  // tensors are ignored by a named rule), or "absent (no mtp.* tensors)".
  bool mtp_available() const { return mtp_available_; }
  const std::string& mtp_status() const { return mtp_status_; }
  // The config of the head's own KV pool: one full-attention layer of the model's shape.
  ModelConfig mtp_kv_config() const;
  // batch.seqs[s].tokens: the next tokens t_{i+1}; .pos: position i of the first hidden row;
  // batch.kv: a pool built from mtp_kv_config(). hidden: [batch tokens, H] final-normed target
  // hidden states in batch order. logits: [logit_rows(batch), vocab], or null to skip the
  // output head (a proposer then runs output_head on the rows it needs). Throws naming the
  // missing tensor when the head is unavailable.
  void mtp_forward(const ForwardBatch& batch, const float* hidden, float* logits);
  // The last mtp_forward's logit rows before the output head, norm(x): [logit rows, H]; also
  // the hidden state a further MTP step takes. Valid until the next forward.
  std::span<const float> mtp_hidden() const {
    return {xn_.data(), static_cast<size_t>(mtp_rows_ * cfg_.hidden_size)};
  }
  // The final norm the output head's input gets: out [n, H] = norm(x [n, H]) (a residual stream
  // tapped after the last layer becomes the final_hidden() row of that token).
  void final_norm_rows(const float* x, int64_t n, float* out) const;

 private:
  // A zero-centred RMSNorm gain as applied: 1 + w (HF), or as stored (GGUF: folded).
  std::vector<float> gain(const std::string& name, int64_t n);
  void bind_gguf_mtp(const QuantConfig& quant);
  void bind_weights(const LoadOptions& opts);
  void bind_layer(HybridLayer& L, const std::string& prefix, bool linear, bool sparse, const QuantConfig& quant);
  void bind_mtp(const QuantConfig& quant);
  // The head on this rank's slices; embedded: the tokens' embedding rows when given (pipeline
  // stages), else looked up here.
  void mtp_local(const ForwardBatch& batch, const float* hidden, const float* embedded, float* logits,
                 bool with_logits);
  bool held_by_last_stage(const std::string& pattern);
  void attention_block(const GatedAttentionWeights& A, int kv_layer, const ForwardBatch& batch);
  void linear_block(const HybridLayer& L, const ForwardBatch& batch);
  void mlp_block(const HybridLayer& L, int64_t n);
  void ensure_buffers(int64_t n);
  void check_states(const ForwardBatch& batch);
  void plan_shares(const QuantConfig& quant);
  // The forward on this rank's shares (collectives included); logits may be null off rank 0.
  void forward_local(const ForwardBatch& batch, float* logits);
  void forward_part(const ForwardBatch& batch, float* logits);  // one micro-batch

  // A tensor-parallel rank's share (dist/tensor_parallel.h): attention heads, Gated DeltaNet
  // key heads with their value heads, MLP intermediate rows, whole experts and shared-expert
  // rows; the embedding and lm_head hold vocabulary rows tp_.vocab_rows().
  struct Shares {
    dist::HeadShard heads;
    GdnShard gdn;
    dist::Range intermediate;
    MoeShard moe;
  };

  std::unique_ptr<Checkpoint> ckpt_;
  ModelConfig cfg_;     // under tensor parallelism: this rank's heads and intermediate size
  GdnShape gdn_shape_;  // this rank's
  ModelConfig full_cfg_;
  GdnShape full_gdn_shape_;
  Shares shares_;
  // mutable: lending the embedding (const embed_rows) is a collective on a split model.
  mutable TpRuntime tp_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ThreadPool> own_pool_;  // null when running on a shared pool
  ThreadPool& pool_;
  Rope rope_;
  Linear embed_;                   // [V, H]
  std::vector<HybridLayer> layers_;
  std::vector<float> final_norm_;  // [H] as 1 + w
  Linear lm_head_;                 // [V, H]
  MtpWeights mtp_;
  bool mtp_available_ = false;
  std::string mtp_status_;
  bool complete_ = false;
  GdnMode gdn_mode_ = GdnMode::Auto;
  int64_t last_rows_ = 0;
  int64_t mtp_rows_ = 0;  // logit rows of the last mtp_forward (mtp_hidden)
  // Activation scratch, grown on demand.
  int64_t cap_tokens_ = 0;
  std::vector<float> x_, xn_, qg_, q_, k_, v_, attn_, gate_, tmp_;  // [n, ...] (gate_: the attention gate)
  std::vector<float> mtp_logits_;  // the last stage's MTP logits for a pipelined rank 0
  std::vector<float> mtp_in_;                                            // [n, 2H]
  std::vector<float> cos_, sin_;                                         // [n, rotary_dim/2]
  std::vector<float> scores_;
  GdnScratch gdn_scratch_;
  FeedForwardScratch ffn_scratch_;
  FlatBatch flat_;
};

}  // namespace zen
