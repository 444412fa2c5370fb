#include "model/dense.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <string_view>

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
  tp_.init(opts.tensor_parallel, cfg_.vocab_size);
  bind_weights(opts);
}

DenseModel::~DenseModel() { tp_.send_stop(); }

void DenseModel::bind_weights(const LoadOptions& opts) {
  const WeightNames names(ckpt_->format() == CheckpointFormat::Gguf);
  Checkpoint& c = *ckpt_;
  const ModelConfig full = cfg_;
  const int64_t H = full.hidden_size, I = full.intermediate_size, V = full.vocab_size, hd = full.head_dim;
  const int64_t q_dim = full.num_heads * hd, kv_dim = full.num_kv_heads * hd;

  // Projections stay in their stored format (plain, GGUF blocks, FP8, NVFP4); see linear.h.
  QuantConfig quant = QuantConfig::from_checkpoint(c);
  quant.nvfp4_exact_activations = opts.nvfp4_exact_activations;

  // This rank's share (everything, without tensor parallelism): query / KV heads, the
  // intermediate rows (cut on the down projections' column blocks), vocabulary rows.
  const int t = tp_.size(), r = tp_.rank();
  const dist::HeadShard heads = dist::head_shard(full, t, r);
  const dist::Range q_rows{heads.q_heads.begin * hd, heads.q_heads.end * hd};
  const dist::Range kv_rows{heads.kv_heads.begin * hd, heads.kv_heads.end * hd};
  const dist::Range all_h{0, H};
  int64_t inter_unit = 1;
  for (int64_t i = 0; i < full.num_layers && t > 1; ++i)
    if (!full.is_sparse_layer(i))
      inter_unit = std::lcm(inter_unit, Linear::column_block(c, names.layer(static_cast<int>(i), "down"), quant));
  const dist::Range inter = dist::split(I, t, r, inter_unit);
  if (inter.size() == 0)
    fail("--tensor-parallel-size ", t, ": the intermediate size ", I, " in blocks of ", inter_unit,
         " leaves rank ", r, " no rows");
  const dist::Range vocab_rows = tp_.vocab_rows();
  cfg_.num_heads = heads.q_heads.size();
  cfg_.num_kv_heads = heads.kv_heads.size();
  cfg_.intermediate_size = inter.size();

  auto matrix = [&](const std::string& name, std::vector<int64_t> shape, dist::Range rows, dist::Range cols) {
    if (t == 1) return Linear::bind(c, name, std::move(shape), quant);
    return Linear::bind_slice(c, name, std::move(shape), quant, rows, cols);
  };
  auto vec = [&](const std::string& name, int64_t n, dist::Range part) -> std::vector<float> {
    const TensorView* t = c.take(name, {n});
    if (t == nullptr) return {};
    if (!is_vector_dtype(t->dtype)) {
      c.note_mismatch(name + ": dtype " + dtype_name(t->dtype) + " is not supported for vectors");
      return {};
    }
    std::vector<float> all = to_f32_vector(*t);
    if (part.size() == n || static_cast<int64_t>(all.size()) != n) return all;
    return {all.begin() + part.begin, all.begin() + part.end};
  };

  // Tied: no separate output matrix (llama.cpp: a GGUF without output.weight is tied).
  const bool tied = cfg_.tie_word_embeddings || (ckpt_->format() == CheckpointFormat::Gguf && !c.has(names.lm_head()));
  if (cfg_.tie_word_embeddings && c.has(names.lm_head()))
    c.ignore(names.lm_head(), "tied to the embedding (tie_word_embeddings)");
  // Pipeline stages: the first embeds, the last holds the final norm and the lm_head.
  const bool embed_here = tp_.first_stage(), head_here = tp_.last_stage();
  if (t > 1) {
    // Vocabulary-parallel: this rank's rows of the embedding and the lm_head.
    if (tied && (embed_here || head_here)) {
      w_.lm_head = Linear::bind_slice(c, names.embed(), {V, H}, quant, vocab_rows, all_h);
      w_.embed = w_.lm_head;
    } else if (!tied) {
      if (embed_here) w_.embed = Linear::bind_slice(c, names.embed(), {V, H}, quant, vocab_rows, all_h, Linear::Use::Rows);
      if (head_here) w_.lm_head = Linear::bind_slice(c, names.lm_head(), {V, H}, quant, vocab_rows, all_h);
    }
    if (!embed_here && !(tied && head_here)) c.ignore(TpRuntime::regex_quote(names.embed()), "held by the first pipeline stage");
    if (!head_here && !tied) c.ignore(TpRuntime::regex_quote(names.lm_head()), "held by the last pipeline stage");
  } else {
    if (embed_here || (tied && head_here)) w_.embed = Linear::bind(c, names.embed(), {V, H}, quant, Linear::Use::Rows);
    else c.ignore(TpRuntime::regex_quote(names.embed()), "held by the first pipeline stage");
    if (head_here) {
      if (!tied) w_.lm_head = Linear::bind(c, names.lm_head(), {V, H}, quant);
      if (!w_.lm_head.valid()) w_.lm_head = w_.embed;
      w_.lm_head.prepare_matmul(c);  // packs a tied embedding for its lm_head use
      // Tied: the embedding reads its rows from that packed copy (dropped file pages would
      // otherwise fault back in, a readahead window per looked-up token, on top of the copy).
      if (w_.lm_head.weight == w_.embed.weight) w_.embed.packed = w_.lm_head.packed;
    } else if (!tied) {
      c.ignore(TpRuntime::regex_quote(names.lm_head()), "held by the last pipeline stage");
    }
  }
  if (tp_.last_stage()) w_.final_norm = vec(names.final_norm(), H, all_h);
  else c.ignore(TpRuntime::regex_quote(names.final_norm()), "held by the last pipeline stage");
  c.ignore(R"(model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq)", "recomputed from the config");
  c.ignore("rope_freqs.weight", "recomputed from the config");

  // This stage's layers (all of them without pipeline parallelism), balanced by the bytes a
  // decoded token reads.
  std::vector<std::string> layer_prefixes;
  for (int64_t i = 0; i < full.num_layers; ++i) layer_prefixes.push_back(names.layer_prefix(static_cast<int>(i)));
  const dist::Range own = tp_.stage_layers(c, full, layer_prefixes, tied ? names.embed() : names.lm_head());
  w_.layers.resize(static_cast<size_t>(own.size()));
  for (int64_t i = own.begin; i < own.end; ++i) {
    DenseLayer& L = w_.layers[static_cast<size_t>(i - own.begin)];
    const int n = static_cast<int>(i);
    L.attn_norm = vec(names.layer(n, "attn_norm"), H, all_h);
    L.wq = matrix(names.layer(n, "q"), {q_dim, H}, q_rows, all_h);
    L.wk = matrix(names.layer(n, "k"), {kv_dim, H}, kv_rows, all_h);
    L.wv = matrix(names.layer(n, "v"), {kv_dim, H}, kv_rows, all_h);
    L.wo = matrix(names.layer(n, "o"), {H, q_dim}, all_h, q_rows);  // row-parallel
    if (full.attention_bias) {
      L.bq = vec(names.layer(n, "q_bias"), q_dim, q_rows);
      L.bk = vec(names.layer(n, "k_bias"), kv_dim, kv_rows);
      L.bv = vec(names.layer(n, "v_bias"), kv_dim, kv_rows);
    }
    if (full.qk_norm) {
      L.q_norm = vec(names.layer(n, "q_norm"), hd, {0, hd});
      L.k_norm = vec(names.layer(n, "k_norm"), hd, {0, hd});
    }
    L.ffn_norm = vec(names.layer(n, "ffn_norm"), H, all_h);
    if (full.is_sparse_layer(i)) {
      L.ffn.sparse = true;
      L.ffn.moe = bind_moe(c, names.moe_prefix(n), full, quant, moe_shard(names, n, quant));
      continue;
    }
    L.ffn.w_gate = matrix(names.layer(n, "gate"), {I, H}, inter, all_h);
    L.ffn.w_up = matrix(names.layer(n, "up"), {I, H}, inter, all_h);
    L.ffn.w_down = matrix(names.layer(n, "down"), {H, I}, all_h, inter);  // row-parallel
  }
  if (own.size() != full.num_layers) {
    // The stage's config: its layers only (the KV pool holds theirs).
    cfg_.num_layers = own.size();
    auto keep = [&](auto& per_layer) {
      if (per_layer.empty()) return;
      per_layer.erase(per_layer.begin() + own.end, per_layer.end());
      per_layer.erase(per_layer.begin(), per_layer.begin() + own.begin);
    };
    keep(cfg_.attention_windows);
    keep(cfg_.layer_types);
  }
  if (tp_.stages() > 1) {
    cfg_.kv_budget_layers = tp_.max_over_ranks(cfg_.num_kv_layers());
    cfg_.kv_budget_window_layers = tp_.max_over_ranks(cfg_.num_window_kv_layers());
    cfg_.kv_budget_other_layers = tp_.max_over_ranks(cfg_.num_kv_layers() - cfg_.num_window_kv_layers());
    cfg_.kv_budget_window = tp_.max_over_ranks(cfg_.max_attention_window());
  }
  const LoadVerdict verdict = c.verdict();
  complete_ = verdict.missing.empty() && verdict.mismatched.empty();
  if (opts.strict) c.require_clean();
}

// This rank's MoE share: whole experts (expert parallel) or every expert's rows, and rows of
// the shared expert's intermediate (cut on the blocks of the down projections' columns).
MoeShard DenseModel::moe_shard(const WeightNames& names, int layer, const QuantConfig& quant) {
  if (tp_.size() == 1) return {};
  return zen::moe_shard(cfg_, tp_.size(), tp_.rank(), tp_.config().expert_parallel,
                        moe_column_blocks(*ckpt_, names.moe_prefix(layer), quant));
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
  if (!tp_.active()) return forward_local(batch, logits);
  if (tp_.world_rank() != 0) fail("forward: rank ", tp_.world_rank(), " of a parallel model runs serve_steps(), not forward()");
  // Everything that can reject the batch is checked before the other ranks are told about it:
  // past the broadcast, a failure on one rank would leave the others inside a collective.
  flat_.build(batch, cfg_.vocab_size, batch.kv->block_size());
  check_tap_layers(batch, tp_.total_layers());
  if (flat_.size() == 0) return;
  tp_.forward(batch, [&] { forward_local(batch, logits); });
}

void DenseModel::serve_steps() {
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  TpRuntime::Worker worker = tp_.lending_worker(w_.embed, w_.lm_head, H, V, pool_);
  worker.forward = [&](const ForwardBatch& batch) { forward_local(batch, nullptr); };
  tp_.serve(cfg_, worker);
}

void DenseModel::forward_local(const ForwardBatch& batch, float* logits) {
  tp_.run_stages(batch, logits, cfg_.vocab_size, cfg_.hidden_size,
                 [&](const ForwardBatch& part, float* part_logits) { forward_part(part, part_logits); });
}

// This rank's layers over one (micro-)batch: embedded here or received from the previous
// stage; sent on, or (last stage) turned into logits.
void DenseModel::forward_part(const ForwardBatch& batch, float* logits) {
  flat_.build(batch, cfg_.vocab_size, batch.kv->block_size());
  const int64_t n = flat_.size();
  if (n == 0) return;
  const int64_t H = cfg_.hidden_size;
  ensure_buffers(n);

  if (tp_.first_stage()) tp_.embed(w_.embed, flat_.ids, cfg_.hidden_size, x_.data());
  else tp_.recv_from_previous_stage(x_.data(), n * H);
  const int64_t half = rope_.dim() / 2;
  for (int64_t t = 0; t < n; ++t) rope_.angles(flat_.pos[static_cast<size_t>(t)], &cos_[t * half], &sin_[t * half]);

  check_tap_layers(batch, tp_.total_layers());
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    attention_block(w_.layers[l], static_cast<int>(l), batch);
    mlp_block(w_.layers[l], n);
    capture_taps(batch, tp_.first_layer() + static_cast<int64_t>(l), x_.data(), n, H);
  }
  if (!tp_.last_stage()) return tp_.send_to_next_stage(x_.data(), n * H);

  const auto rows = static_cast<int64_t>(flat_.logit_row.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = flat_.logit_row[static_cast<size_t>(r)];
    kernels::rmsnorm(&x_[t * H], w_.final_norm.data(), static_cast<float>(cfg_.rms_norm_eps), H, &xn_[r * H]);
  }
  tp_.logits(w_.lm_head, xn_.data(), rows, cfg_.vocab_size, logits, pool_, batch.argmax_only);
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
  const LayerKv kv = layer_kv(batch, cfg_, layer);
  store_kv(kv, batch, flat_, k_.data(), v_.data(), kv_dim);
  const AttentionShape shape{nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd)), cfg_.attention_window(layer)};
  paged_attention(kv, batch, flat_, shape, q_.data(), attn_.data(), pool_, scores_);
  L.wo.matmul(attn_.data(), n, tmp_.data(), pool_);
  tp_.all_reduce(tmp_.data(), n * H);  // row-parallel o_proj: sum the ranks' head groups
  kernels::add_inplace(x_.data(), tmp_.data(), n * H);
}

void DenseModel::mlp_block(const DenseLayer& L, int64_t n) {
  const int64_t H = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&x_[t * H], L.ffn_norm.data(), eps, H, &xn_[t * H]);
  feed_forward(L.ffn, xn_.data(), n, tmp_.data(), pool_, ffn_scratch_);
  tp_.all_reduce(tmp_.data(), n * H);  // row-parallel down: sum the ranks' intermediate slices
  kernels::add_inplace(x_.data(), tmp_.data(), n * H);
}

void DenseModel::embed_rows(std::span<const int32_t> ids, float* out) const {
  if (!tp_.active()) return embedding_rows(w_.embed, cfg_.vocab_size, cfg_.hidden_size, ids, out);
  tp_.lend_embedding_rows(w_.embed, ids, cfg_.hidden_size, cfg_.vocab_size, out);
}

void DenseModel::output_head(const float* hidden, int64_t rows, float* logits) {
  if (!tp_.active()) return w_.lm_head.matmul(hidden, rows, logits, pool_);
  tp_.lend_output_head(w_.lm_head, hidden, rows, cfg_.hidden_size, cfg_.vocab_size, logits, pool_);
}

}  // namespace zen
