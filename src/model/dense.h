// Decoder-only transformer of the family: llama-style (SmolLM2, stories260K), Qwen2 (q/k/v
// bias), Qwen3 (per-head q/k RMSNorm), Qwen3-MoE (Qwen3 whose sparse layers replace the MLP
// by a mixture of experts, model/moe.h) and Qwen2-MoE (Qwen2 attention, experts plus a gated
// shared expert). Pre-norm blocks:
//   x += o_proj(attention(rope(q), rope(k), v));  x += down(silu(gate(n(x))) * up(n(x)))
//   (sparse layers: x += moe(n(x)))
#pragma once
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "model/attention.h"
#include "model/linear.h"
#include "model/model.h"
#include "model/mlp.h"
#include "model/rope.h"
#include "model/tp_runtime.h"

namespace zen {

class WeightNames;

struct DenseLayer {
  std::vector<float> attn_norm;      // [H]
  Linear wq;    // [nh*hd, H]
  Linear wk;    // [nkv*hd, H]
  Linear wv;    // [nkv*hd, H]
  Linear wo;    // [H, nh*hd]
  std::vector<float> bq, bk, bv;     // [nh*hd], [nkv*hd], [nkv*hd] (Qwen2), else empty
  std::vector<float> q_norm, k_norm; // [hd] (Qwen3), else empty
  std::vector<float> ffn_norm;       // [H]
  FeedForward ffn;  // SwiGLU or MoE (model/mlp.h)
};

struct DenseWeights {
  Linear embed;    // [V, H] (rows dequantized on lookup)
  std::vector<DenseLayer> layers;
  std::vector<float> final_norm;        // [H]
  Linear lm_head;  // [V, H] (the embedding when tied)
};

class DenseModel final : public Model {
 public:
  DenseModel(std::unique_ptr<Checkpoint> ckpt, ModelConfig cfg, std::unique_ptr<Tokenizer> tok,
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
  ~DenseModel() override;  // rank 0 of a tensor-parallel model releases the other ranks

 private:
  void bind_weights(const LoadOptions& opts);  // takes every tensor from the checkpoint ledger
  MoeShard moe_shard(const WeightNames& names, int layer, const QuantConfig& quant);
  void attention_block(const DenseLayer& L, int layer, const ForwardBatch& batch);
  void mlp_block(const DenseLayer& L, int64_t n);
  void ensure_buffers(int64_t n);
  // The forward on this rank's slices (collectives included); logits may be null off rank 0.
  void forward_local(const ForwardBatch& batch, float* logits);
  void forward_part(const ForwardBatch& batch, float* logits);  // one micro-batch

  std::unique_ptr<Checkpoint> ckpt_;
  ModelConfig cfg_;  // under tensor parallelism: this rank's heads and intermediate size
  std::unique_ptr<Tokenizer> tok_;
  // Tensor parallelism (dist/tensor_parallel.h): the embedding and lm_head hold vocabulary
  // rows tp_.vocab_rows() of the whole model's.
  // mutable: lending the embedding (const embed_rows) is a collective on a split model.
  mutable TpRuntime tp_;
  std::unique_ptr<ThreadPool> own_pool_;  // null when running on a shared pool
  ThreadPool& pool_;
  Rope rope_;
  DenseWeights w_;
  bool complete_ = false;  // every needed tensor bound (false only when loaded non-strict)
  // Activation scratch, grown on demand (no allocation in steady-state decode).
  int64_t cap_tokens_ = 0;
  std::vector<float> x_, xn_, q_, k_, v_, attn_, tmp_;  // [n, ...]
  std::vector<float> cos_, sin_;                                    // [n, rope_dim/2]
  std::vector<float> scores_;                                       // [threads, context]
  FlatBatch flat_;
  FeedForwardScratch ffn_scratch_;
};

}  // namespace zen
