#include "model/dense.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/attention.h"
#include "model/weight_names.h"

namespace zen {
namespace {

// Small vectors (norms, biases) are converted to f32 once at load.
std::vector<float> to_f32_vector(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  kernels::dequantize_row(t.dtype, t.data, out.data(), t.numel());
  return out;
}

bool is_vector_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

}  // namespace

DenseModel::DenseModel(std::unique_ptr<Checkpoint> ckpt, ModelConfig cfg, std::unique_ptr<Tokenizer> tok,
                       const LoadOptions& opts)
    : ckpt_(std::move(ckpt)), cfg_(std::move(cfg)), tok_(std::move(tok)), own_pool_(opts.shared_pool ? nullptr : std::make_unique<ThreadPool>(opts.n_threads)),
      pool_(opts.shared_pool ? *opts.shared_pool : *own_pool_),
      rope_(cfg_) {
  bind_weights(opts);
}

void DenseModel::bind_weights(const LoadOptions& opts) {
  const WeightNames names(ckpt_->format() == CheckpointFormat::Gguf);
  Checkpoint& c = *ckpt_;
  const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size;
  const int64_t q_dim = cfg_.num_heads * cfg_.head_dim, kv_dim = cfg_.num_kv_heads * cfg_.head_dim;

  // Projections stay in their stored format (plain, GGUF blocks, FP8, NVFP4); see linear.h.
  QuantConfig quant = QuantConfig::from_checkpoint(c);
  quant.nvfp4_exact_activations = opts.nvfp4_exact_activations;
  auto matrix = [&](const std::string& name, std::vector<int64_t> shape) -> Linear {
    return Linear::bind(c, name, std::move(shape), quant);
  };
  auto vec = [&](const std::string& name, int64_t n) -> std::vector<float> {
    const TensorView* t = c.take(name, {n});
    if (t == nullptr) return {};
    if (!is_vector_dtype(t->dtype)) {
      c.note_mismatch(name + ": dtype " + dtype_name(t->dtype) + " is not supported for vectors");
      return {};
    }
    return to_f32_vector(*t);
  };

  w_.embed = Linear::bind(c, names.embed(), {V, H}, quant, Linear::Use::Rows);
  w_.final_norm = vec(names.final_norm(), H);
  if (cfg_.tie_word_embeddings && !c.has(names.lm_head())) {
    w_.lm_head = w_.embed;
  } else if (ckpt_->format() == CheckpointFormat::Gguf && !c.has(names.lm_head())) {
    w_.lm_head = w_.embed;  // llama.cpp: no output.weight means tied
  } else {
    if (cfg_.tie_word_embeddings) c.ignore(names.lm_head(), "tied to the embedding (tie_word_embeddings)");
    else w_.lm_head = matrix(names.lm_head(), {V, H});
    if (!w_.lm_head.valid()) w_.lm_head = w_.embed;
  }
  w_.lm_head.prepare_matmul(c);  // packs a tied embedding for its lm_head use
  // Tied: the embedding reads its rows from that packed copy (dropped file pages would
  // otherwise fault back in, a readahead window per looked-up token, on top of the copy).
  if (w_.lm_head.weight == w_.embed.weight) w_.embed.packed = w_.lm_head.packed;
  c.ignore(R"(model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq)", "recomputed from the config");
  c.ignore("rope_freqs.weight", "recomputed from the config");

  w_.layers.resize(static_cast<size_t>(cfg_.num_layers));
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    DenseLayer& L = w_.layers[static_cast<size_t>(i)];
    const int n = static_cast<int>(i);
    L.attn_norm = vec(names.layer(n, "attn_norm"), H);
    L.wq = matrix(names.layer(n, "q"), {q_dim, H});
    L.wk = matrix(names.layer(n, "k"), {kv_dim, H});
    L.wv = matrix(names.layer(n, "v"), {kv_dim, H});
    L.wo = matrix(names.layer(n, "o"), {H, q_dim});
    if (cfg_.attention_bias) {
      L.bq = vec(names.layer(n, "q_bias"), q_dim);
      L.bk = vec(names.layer(n, "k_bias"), kv_dim);
      L.bv = vec(names.layer(n, "v_bias"), kv_dim);
    }
    if (cfg_.qk_norm) {
      L.q_norm = vec(names.layer(n, "q_norm"), cfg_.head_dim);
      L.k_norm = vec(names.layer(n, "k_norm"), cfg_.head_dim);
    }
    L.ffn_norm = vec(names.layer(n, "ffn_norm"), H);
    if (cfg_.is_sparse_layer(i)) {
      L.ffn.sparse = true;
      L.ffn.moe = bind_moe(c, names.moe_prefix(n), cfg_, quant);
      continue;
    }
    L.ffn.w_gate = matrix(names.layer(n, "gate"), {I, H});
    L.ffn.w_up = matrix(names.layer(n, "up"), {I, H});
    L.ffn.w_down = matrix(names.layer(n, "down"), {H, I});
  }
  const LoadVerdict verdict = c.verdict();
  complete_ = verdict.missing.empty() && verdict.mismatched.empty();
  if (opts.strict) c.require_clean();
}

void DenseModel::ensure_buffers(int64_t n) {
  if (n <= cap_tokens_) return;
  const auto N = static_cast<size_t>(n);
  const auto H = static_cast<size_t>(cfg_.hidden_size);
  const auto q_dim = static_cast<size_t>(cfg_.num_heads * cfg_.head_dim);
  const auto kv_dim = static_cast<size_t>(cfg_.num_kv_heads * cfg_.head_dim);
  x_.resize(N * H);
  xn_.resize(N * H);
  tmp_.resize(N * H);
  q_.resize(N * q_dim);
  attn_.resize(N * q_dim);
  k_.resize(N * kv_dim);
  v_.resize(N * kv_dim);
  cos_.resize(N * static_cast<size_t>(rope_.dim() / 2));
  sin_.resize(cos_.size());
  cap_tokens_ = n;
}

void DenseModel::forward(const ForwardBatch& batch, float* logits) {
  if (!complete_) fail("the model was loaded with missing or mismatched tensors and cannot run");
  if (batch.kv == nullptr) fail("forward: the batch has no KV pool");
  flat_.build(batch, cfg_.vocab_size, batch.kv->block_size());
  const int64_t n = flat_.size();
  if (n == 0) return;
  const int64_t H = cfg_.hidden_size;
  ensure_buffers(n);

  for (int64_t t = 0; t < n; ++t) w_.embed.dequantize_row(flat_.ids[static_cast<size_t>(t)], &x_[t * H]);
  const int64_t half = rope_.dim() / 2;
  for (int64_t t = 0; t < n; ++t) rope_.angles(flat_.pos[static_cast<size_t>(t)], &cos_[t * half], &sin_[t * half]);

  check_tap_layers(batch, cfg_.num_layers);
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    attention_block(w_.layers[l], static_cast<int>(l), batch);
    mlp_block(w_.layers[l], n);
    capture_taps(batch, static_cast<int64_t>(l), x_.data(), n, H);
  }

  const auto rows = static_cast<int64_t>(flat_.logit_row.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = flat_.logit_row[static_cast<size_t>(r)];
    kernels::rmsnorm(&x_[t * H], w_.final_norm.data(), static_cast<float>(cfg_.rms_norm_eps), H, &xn_[r * H]);
  }
  w_.lm_head.matmul(xn_.data(), rows, logits, pool_);
}

void DenseModel::attention_block(const DenseLayer& L, int layer, const ForwardBatch& batch) {
  const int64_t n = flat_.size();
  const int64_t H = cfg_.hidden_size, hd = cfg_.head_dim;
  const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads;
  const int64_t q_dim = nh * hd, kv_dim = nkv * hd;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&x_[t * H], L.attn_norm.data(), eps, H, &xn_[t * H]);
  L.wq.matmul(xn_.data(), n, q_.data(), pool_);
  L.wk.matmul(xn_.data(), n, k_.data(), pool_);
  L.wv.matmul(xn_.data(), n, v_.data(), pool_);
  const int64_t half = rope_.dim() / 2;
  for (int64_t t = 0; t < n; ++t) {
    float* q = &q_[t * q_dim];
    float* k = &k_[t * kv_dim];
    float* v = &v_[t * kv_dim];
    if (!L.bq.empty()) {
      kernels::add_inplace(q, L.bq.data(), q_dim);
      kernels::add_inplace(k, L.bk.data(), kv_dim);
      kernels::add_inplace(v, L.bv.data(), kv_dim);
    }
    if (!L.q_norm.empty()) {
      for (int64_t h = 0; h < nh; ++h) kernels::rmsnorm(q + h * hd, L.q_norm.data(), eps, hd, q + h * hd);
      for (int64_t h = 0; h < nkv; ++h) kernels::rmsnorm(k + h * hd, L.k_norm.data(), eps, hd, k + h * hd);
    }
    rope_.apply(q, nh, hd, &cos_[t * half], &sin_[t * half]);
    rope_.apply(k, nkv, hd, &cos_[t * half], &sin_[t * half]);
  }
  const int kv_layer = cfg_.kv_layer_index(layer);
  store_kv(*batch.kv, kv_layer, batch, flat_, k_.data(), v_.data(), kv_dim);
  const AttentionShape shape{nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd)), cfg_.attention_window(layer)};
  paged_attention(*batch.kv, kv_layer, batch, flat_, shape, q_.data(), attn_.data(), pool_, scores_);
  L.wo.matmul(attn_.data(), n, tmp_.data(), pool_);
  kernels::add_inplace(x_.data(), tmp_.data(), n * H);
}

void DenseModel::mlp_block(const DenseLayer& L, int64_t n) {
  const int64_t H = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&x_[t * H], L.ffn_norm.data(), eps, H, &xn_[t * H]);
  feed_forward(L.ffn, xn_.data(), n, tmp_.data(), pool_, ffn_scratch_);
  kernels::add_inplace(x_.data(), tmp_.data(), n * H);
}

void DenseModel::embed_rows(std::span<const int32_t> ids, float* out) const {
  embedding_rows(w_.embed, cfg_.vocab_size, cfg_.hidden_size, ids, out);
}

void DenseModel::output_head(const float* hidden, int64_t rows, float* logits) {
  w_.lm_head.matmul(hidden, rows, logits, pool_);
}

}  // namespace zen
