#include "model/hybrid.h"

#include <cmath>
#include <numeric>
#include <set>
#include <string>

#include "base/error.h"
#include "kernels/cpu/ops.h"
#include "model/state_cache.h"

namespace zen {
namespace {

// Zero-centred gains are stored as w and applied as (1 + w); convert once at load (f32, as
// HF's `1.0 + weight.float()`).
std::vector<float> one_plus(std::vector<float> w) {
  for (float& x : w) x = 1.0f + x;
  return w;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

HybridModel::HybridModel(std::unique_ptr<Checkpoint> ckpt, ModelConfig cfg, std::unique_ptr<Tokenizer> tok,
                         const LoadOptions& opts)
    : ckpt_(std::move(ckpt)),
      cfg_(std::move(cfg)),
      gdn_shape_(GdnShape::from_config(cfg_)),
      tok_(std::move(tok)),
      own_pool_(opts.shared_pool ? nullptr : std::make_unique<ThreadPool>(opts.n_threads)),
      pool_(opts.shared_pool ? *opts.shared_pool : *own_pool_),
      rope_(cfg_) {
  if (!cfg_.zero_centered_norm || !cfg_.attn_output_gate)
    fail("hybrid model: ", cfg_.architecture, " config lacks zero-centred norms or the attention output gate");
  tp_.init(opts.tensor_parallel, cfg_.vocab_size);
  bind_weights(opts);
}

HybridModel::~HybridModel() { tp_.send_stop(); }

std::vector<float> HybridModel::gain(const std::string& name, int64_t n) {
  std::vector<float> w = take_f32_vector(*ckpt_, name, {n});
  return cfg_.gguf_hybrid_layout ? w : one_plus(std::move(w));  // llama.cpp's converter folded the 1 in
}

void HybridModel::bind_weights(const LoadOptions& opts) {
  Checkpoint& c = *ckpt_;
  const bool gguf = cfg_.gguf_hybrid_layout;
  const std::string& root = cfg_.text_prefix;  // "model." or "model.language_model."
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  QuantConfig quant = QuantConfig::from_checkpoint(c);
  quant.nvfp4_exact_activations = opts.nvfp4_exact_activations;
  plan_shares(quant);
  const dist::Range vocab_rows = tp_.vocab_rows(), all_h{0, H};
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    return Linear::bind(c, name, {rows, cols}, quant);
  };

  const std::string embed_name = gguf ? "token_embd.weight" : root + "embed_tokens.weight";
  const std::string final_norm = gguf ? "output_norm.weight" : root + "norm.weight";
  final_norm_ = gain(final_norm, H);  // every stage: rank 0 final-norms the rows an MTP head reads
  const std::string head = gguf ? "output.weight" : "lm_head.weight";
  if (gguf) cfg_.tie_word_embeddings = !c.has(head);  // llama.cpp: no output tensor means tied
  if (cfg_.tie_word_embeddings && c.has(head)) c.ignore("lm_head\\.weight", "tied to the embedding (tie_word_embeddings)");
  const bool tied = cfg_.tie_word_embeddings;
  // Pipeline stages: the first embeds, the last holds the lm_head.
  const bool embed_here = tp_.first_stage(), head_here = tp_.last_stage();
  if (tp_.size() > 1) {
    // Vocabulary-parallel: this rank's rows of the embedding and the lm_head.
    if (tied && (embed_here || head_here)) {
      lm_head_ = Linear::bind_slice(c, embed_name, {V, H}, quant, vocab_rows, all_h);
      embed_ = lm_head_;
    } else if (!tied) {
      if (embed_here) embed_ = Linear::bind_slice(c, embed_name, {V, H}, quant, vocab_rows, all_h, Linear::Use::Rows);
      if (head_here) lm_head_ = Linear::bind_slice(c, head, {V, H}, quant, vocab_rows, all_h);
    }
    if (!embed_here && !(tied && head_here)) c.ignore(TpRuntime::regex_quote(embed_name), "held by the first pipeline stage");
    if (!head_here && !tied) c.ignore(TpRuntime::regex_quote(head), "held by the last pipeline stage");
  } else {
    if (embed_here || (tied && head_here)) embed_ = Linear::bind(c, embed_name, {V, H}, quant, Linear::Use::Rows);
    else c.ignore(TpRuntime::regex_quote(embed_name), "held by the first pipeline stage");
    if (head_here) {
      lm_head_ = tied ? embed_ : matrix(head, V, H);
      lm_head_.prepare_matmul(c);  // packs a tied embedding for its lm_head use
    } else if (!tied) {
      c.ignore(TpRuntime::regex_quote(head), "held by the last pipeline stage");
    }
  }
  c.ignore(R"(model\.visual\..*)", "vision tower (the engine runs the text decoder only)");

  // This stage's layers (all of them without pipeline stages); its recurrent states hold
  // only their layers.
  std::vector<std::string> prefixes;
  for (int64_t i = 0; i < cfg_.num_layers; ++i)
    prefixes.push_back(gguf ? "blk." + std::to_string(i) + "." : root + "layers." + std::to_string(i) + ".");
  const dist::Range own = tp_.stage_layers(c, cfg_, prefixes, tied ? embed_name : head);
  int64_t state_offset = 0;
  layers_.resize(static_cast<size_t>(own.size()));
  for (int64_t i = own.begin; i < own.end; ++i) {
    HybridLayer& L = layers_[static_cast<size_t>(i - own.begin)];
    const bool linear = !cfg_.is_full_attention(i);
    bind_layer(L, prefixes[static_cast<size_t>(i)], linear, cfg_.is_sparse_layer(i), quant);
    if (linear) {
      L.state_offset = state_offset;
      state_offset += gdn_shape_.state_floats();
    }
  }
  bind_mtp(quant);
  if (own.size() != cfg_.num_layers) {
    // The stage's config: its layers' kinds, in order (the KV pool and states hold theirs).
    std::vector<std::string> types;
    for (int64_t i = own.begin; i < own.end; ++i)
      types.emplace_back(cfg_.is_full_attention(i) ? "full_attention" : "linear_attention");
    cfg_.layer_types = std::move(types);
    cfg_.num_layers = own.size();
    if (!cfg_.attention_windows.empty())
      cfg_.attention_windows = {cfg_.attention_windows.begin() + own.begin, cfg_.attention_windows.begin() + own.end};
  }
  if (tp_.stages() > 1) cfg_.kv_budget_layers = tp_.max_over_ranks(cfg_.num_kv_layers());
  ZEN_CHECK(state_offset == recurrent_state_floats(cfg_), "state layout ", state_offset, " vs ",
            recurrent_state_floats(cfg_));
  const LoadVerdict verdict = c.verdict();
  complete_ = verdict.missing.empty() && verdict.mismatched.empty();
  if (opts.strict) c.require_clean();
}

// This rank's share of every layer kind, and cfg_ / gdn_shape_ cut to it (the whole model's
// kept in full_cfg_ / full_gdn_shape_). Intermediate rows are cut on the blocks of the down
// projections' columns, as the dense model does.
void HybridModel::plan_shares(const QuantConfig& quant) {
  full_cfg_ = cfg_;
  full_gdn_shape_ = gdn_shape_;
  if (tp_.size() == 1) return;
  const Checkpoint& c = *ckpt_;
  const bool gguf = cfg_.gguf_hybrid_layout;
  const int t = tp_.size(), r = tp_.rank();
  const std::string& root = cfg_.text_prefix;
  auto layer = [&](int64_t i) { return gguf ? "blk." + std::to_string(i) + "." : root + "layers." + std::to_string(i) + "."; };
  int64_t inter_unit = 1;
  MoeColumnBlocks moe_blocks;  // over every MoE layer
  bool any_dense_mlp = false;
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    if (cfg_.is_sparse_layer(i)) {
      const std::string prefix = layer(i);
      const MoeColumnBlocks b = moe_column_blocks(c, prefix.substr(0, prefix.size() - 1) + (gguf ? "" : ".mlp"), quant);
      moe_blocks.experts = std::lcm(moe_blocks.experts, b.experts);
      moe_blocks.shared = std::lcm(moe_blocks.shared, b.shared);
    } else {
      any_dense_mlp = true;
      const std::string down = layer(i) + (gguf ? "ffn_down.weight" : "mlp.down_proj.weight");
      inter_unit = std::lcm(inter_unit, Linear::column_block(c, down, quant));
    }
  }
  shares_.heads = dist::head_shard(cfg_, t, r);
  shares_.gdn.whole = false;
  shares_.gdn.key_heads = dist::split(cfg_.linear_num_key_heads, t, r);
  shares_.intermediate = dist::split(cfg_.intermediate_size, t, r, inter_unit);
  if (cfg_.num_experts > 0) shares_.moe = moe_shard(cfg_, t, r, tp_.config().expert_parallel, moe_blocks);
  if (any_dense_mlp && shares_.intermediate.size() == 0)
    fail("--tensor-parallel-size ", t, ": the intermediate size ", cfg_.intermediate_size, " in blocks of ", inter_unit,
         " leaves rank ", r, " no rows");
  cfg_.num_heads = shares_.heads.q_heads.size();
  cfg_.num_kv_heads = shares_.heads.kv_heads.size();
  cfg_.intermediate_size = shares_.intermediate.size();
  gdn_shape_ = local_gdn_shape(full_gdn_shape_, shares_.gdn);
  cfg_.linear_num_key_heads = gdn_shape_.num_k_heads;
  cfg_.linear_num_value_heads = gdn_shape_.num_v_heads;
}

// p: "model.layers.N." (HF) or "blk.N." (GGUF, llama.cpp's qwen35 names).
void HybridModel::bind_layer(HybridLayer& L, const std::string& p, bool linear, bool sparse, const QuantConfig& quant) {
  Checkpoint& c = *ckpt_;
  const bool gguf = cfg_.gguf_hybrid_layout;
  const ModelConfig& f = full_cfg_;  // shapes on file; this rank binds its shares_
  const int64_t H = f.hidden_size, I = f.intermediate_size, hd = f.head_dim;
  const int64_t nh = f.num_heads, nkv = f.num_kv_heads;
  const dist::Range all_h{0, H};
  // Rows x cols of a matrix, or this rank's rows / cols of it.
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, dist::Range keep_rows = {},
                    dist::Range keep_cols = {}) {
    if (tp_.size() == 1) return Linear::bind(c, name, {rows, cols}, quant);
    return Linear::bind_slice(c, name, {rows, cols}, quant, keep_rows.size() > 0 ? keep_rows : dist::Range{0, rows},
                              keep_cols.size() > 0 ? keep_cols : dist::Range{0, cols});
  };
  const dist::Range q_heads = shares_.heads.q_heads, kv_heads = shares_.heads.kv_heads;
  // HF suffix, GGUF suffix.
  auto name = [&](const char* hf, const char* gg) { return p + (gguf ? gg : hf); };
  L.linear = linear;
  L.attn_norm = gain(name("input_layernorm.weight", "attn_norm.weight"), H);
  if (linear) {
    L.gdn = bind_gdn(c, gguf ? p : p + "linear_attn.", full_gdn_shape_, cfg_.linear_fused_projections, quant, gguf,
                     shares_.gdn);
  } else {
    // Per head [query | gate] rows; o_proj row-parallel over the query heads.
    const dist::Range q_rows{q_heads.begin * 2 * hd, q_heads.end * 2 * hd};
    const dist::Range kv_rows{kv_heads.begin * hd, kv_heads.end * hd};
    L.attn.wq = matrix(name("self_attn.q_proj.weight", "attn_q.weight"), nh * 2 * hd, H, q_rows);
    L.attn.wk = matrix(name("self_attn.k_proj.weight", "attn_k.weight"), nkv * hd, H, kv_rows);
    L.attn.wv = matrix(name("self_attn.v_proj.weight", "attn_v.weight"), nkv * hd, H, kv_rows);
    L.attn.wo = matrix(name("self_attn.o_proj.weight", "attn_output.weight"), H, nh * hd, all_h,
                       {q_heads.begin * hd, q_heads.end * hd});
    L.attn.q_norm = gain(name("self_attn.q_norm.weight", "attn_q_norm.weight"), hd);
    L.attn.k_norm = gain(name("self_attn.k_norm.weight", "attn_k_norm.weight"), hd);
  }
  L.ffn_norm = gain(name("post_attention_layernorm.weight", "post_attention_norm.weight"), H);
  if (sparse) {
    L.ffn.sparse = true;
    L.ffn.moe = bind_moe(c, gguf ? p.substr(0, p.size() - 1) : p + "mlp", f, quant, shares_.moe);  // GGUF: "blk.N"
    return;
  }
  const dist::Range inter = shares_.intermediate;
  L.ffn.w_gate = matrix(name("mlp.gate_proj.weight", "ffn_gate.weight"), I, H, inter);
  L.ffn.w_up = matrix(name("mlp.up_proj.weight", "ffn_up.weight"), I, H, inter);
  L.ffn.w_down = matrix(name("mlp.down_proj.weight", "ffn_down.weight"), H, I, all_h, inter);
}

// The MTP head binds when mtp.fc.weight exists; without it the head cannot run, and its other
// tensors (often shipped anyway) are ignored by a rule that names the missing projection.
// In pipeline stages the MTP head (present and complete) is bound by the last stage; the
// others mark its tensors as the last stage's and know it is there (rank 0 lends it).
bool HybridModel::held_by_last_stage(const std::string& pattern) {
  if (tp_.stages() == 1 || tp_.last_stage()) return false;
  ckpt_->ignore(pattern, "the MTP head, held by the last pipeline stage");
  mtp_available_ = true;
  mtp_status_ = "available (1 layer, on the last pipeline stage)";
  return true;
}

void HybridModel::bind_mtp(const QuantConfig& quant) {
  Checkpoint& c = *ckpt_;
  const int64_t H = cfg_.hidden_size;
  if (cfg_.gguf_hybrid_layout) return bind_gguf_mtp(quant);
  bool any = false;
  for (const std::string& name : c.tensor_names()) any = any || name.starts_with("mtp.");
  if (!any) {
    mtp_status_ = "absent (no mtp.* tensors)";
    return;
  }
  if (!c.has("mtp.fc.weight")) {
    mtp_status_ = "unavailable (missing mtp.fc.weight)";
    c.ignore(R"(mtp\..*)", "MTP head unavailable: mtp.fc.weight is missing");
    return;
  }
  if (held_by_last_stage(R"(mtp\..*)")) return;
  mtp_.fc = Linear::bind(c, "mtp.fc.weight", {H, 2 * H}, quant);
  mtp_.norm_embedding = gain("mtp.pre_fc_norm_embedding.weight", H);
  mtp_.norm_hidden = gain("mtp.pre_fc_norm_hidden.weight", H);
  mtp_.norm = gain("mtp.norm.weight", H);
  bind_layer(mtp_.layer, "mtp.layers.0.", /*linear=*/false, /*sparse=*/cfg_.num_experts > 0, quant);
  mtp_available_ = true;
  mtp_status_ = "available (1 layer)";
}

// llama.cpp's layout: the MTP block is blk.<num_layers> (qwen35.nextn_predict_layers = 1), a
// full-attention decoder layer under the usual names plus nextn.eh_proj (HF mtp.fc),
// nextn.enorm / nextn.hnorm (pre_fc_norm_embedding / _hidden) and nextn.shared_head_norm
// (mtp.norm), gains folded like the others. It shares token_embd and the lm_head.
void HybridModel::bind_gguf_mtp(const QuantConfig& quant) {
  Checkpoint& c = *ckpt_;
  const int64_t H = cfg_.hidden_size;
  if (cfg_.nextn_layers == 0) {
    mtp_status_ = "absent (no nextn layers)";
    return;
  }
  const std::string block = "blk." + std::to_string(cfg_.num_layers) + ".";
  const std::string block_pattern = "blk\\." + std::to_string(cfg_.num_layers) + "\\.";  // a regex
  if (cfg_.nextn_layers != 1) {
    mtp_status_ = "unavailable (" + std::to_string(cfg_.nextn_layers) + " nextn blocks; one is supported)";
    for (int64_t b = cfg_.num_layers; b < cfg_.num_layers + cfg_.nextn_layers; ++b)
      c.ignore("blk\\." + std::to_string(b) + "\\..*", "more than one MTP (nextn) block");
    return;
  }
  if (!c.has(block + "nextn.eh_proj.weight")) {
    mtp_status_ = "unavailable (missing " + block + "nextn.eh_proj.weight)";
    c.ignore(block_pattern + ".*", "MTP head unavailable: " + block + "nextn.eh_proj.weight is missing");
    return;
  }
  if (held_by_last_stage(block_pattern + ".*")) return;
  mtp_.fc = Linear::bind(c, block + "nextn.eh_proj.weight", {H, 2 * H}, quant);
  mtp_.norm_embedding = gain(block + "nextn.enorm.weight", H);
  mtp_.norm_hidden = gain(block + "nextn.hnorm.weight", H);
  mtp_.norm = gain(block + "nextn.shared_head_norm.weight", H);
  c.ignore(block_pattern + R"(nextn\.(embed_tokens|shared_head_head)\.weight)",
           "Qwen3.5's MTP head shares the model's embedding and lm_head");
  bind_layer(mtp_.layer, block, /*linear=*/false, /*sparse=*/cfg_.num_experts > 0, quant);
  mtp_available_ = true;
  mtp_status_ = "available (1 layer)";
}

ModelConfig HybridModel::mtp_kv_config() const {
  ModelConfig c = cfg_;
  c.num_layers = 1;
  c.layer_types = {"full_attention"};
  return c;
}

void HybridModel::ensure_buffers(int64_t n) {
  if (n <= cap_tokens_) return;
  const auto N = static_cast<size_t>(n);
  const auto H = static_cast<size_t>(cfg_.hidden_size);
  const auto q_dim = static_cast<size_t>(cfg_.num_heads * cfg_.head_dim);
  const auto kv_dim = static_cast<size_t>(cfg_.num_kv_heads * cfg_.head_dim);
  x_.resize(N * H);
  xn_.resize(N * H);
  tmp_.resize(N * H);
  qg_.resize(N * 2 * q_dim);
  q_.resize(N * q_dim);
  gate_.resize(N * q_dim);
  attn_.resize(N * q_dim);
  k_.resize(N * kv_dim);
  v_.resize(N * kv_dim);
  mtp_in_.resize(N * 2 * H);
  cos_.resize(N * static_cast<size_t>(rope_.dim() / 2));
  sin_.resize(cos_.size());
  cap_tokens_ = n;
}

// Checks the batch's state slots (forward_local zeroes those of sequences at position 0).
void HybridModel::check_states(const ForwardBatch& batch) {
  if (batch.states == nullptr) fail("forward: a hybrid model needs a recurrent-state pool in the batch");
  if (batch.states->floats_per_slot() != recurrent_state_floats(cfg_))
    fail("forward: recurrent-state slots hold ", batch.states->floats_per_slot(), " floats, the model needs ",
         recurrent_state_floats(cfg_));
  std::set<int32_t> used;  // every slot the batch writes: states, then history targets
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SeqSlice& seq = batch.seqs[s];
    if (seq.state_slot < 0 || seq.state_slot >= batch.states->num_slots())
      fail("forward: sequence ", s, " has state slot ", seq.state_slot, " outside [0, ", batch.states->num_slots(), ")");
    if (!used.insert(seq.state_slot).second)
      fail("forward: state slot ", seq.state_slot, " is used twice in one batch");
  }
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SeqSlice& seq = batch.seqs[s];
    for (size_t i = 0; i < seq.state_history.size(); ++i) {
      const int32_t h = seq.state_history[i];
      if (h < 0 || h >= batch.states->num_slots())
        fail("forward: sequence ", s, " has state-history slot ", h, " outside [0, ", batch.states->num_slots(), ")");
      // The sequence's own slot may only receive the state after its last token (it gets it anyway).
      const bool own_last = h == seq.state_slot && i + 1 == seq.state_history.size();
      if (!own_last && !used.insert(h).second)
        fail("forward: state-history slot ", h, " of sequence ", s, " is also written by another state or token");
    }
  }
}

void HybridModel::forward(const ForwardBatch& batch, float* logits) {
  if (!complete_) fail("the model was loaded with missing or mismatched tensors and cannot run");
  if (batch.kv == nullptr) fail("forward: the batch has no KV pool");
  // Everything that can reject the batch is checked before a tensor-parallel step goes out.
  flat_.build(batch, cfg_.vocab_size, batch.kv->block_size());
  if (flat_.size() == 0) return;
  check_states(batch);
  check_tap_layers(batch, tp_.total_layers());
  if (!tp_.active()) return forward_local(batch, logits);
  if (tp_.world_rank() != 0) fail("forward: rank ", tp_.world_rank(), " of a parallel model runs serve_steps(), not forward()");
  tp_.forward(batch, [&] { forward_local(batch, logits); });
}

void HybridModel::serve_steps() {
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  TpRuntime::Worker worker = tp_.lending_worker(embed_, lm_head_, H, V, pool_);
  worker.forward = [&](const ForwardBatch& batch) {
    check_states(batch);
    forward_local(batch, nullptr);
  };
  if (mtp_available_) {
    // The last stage runs the head (the only one in tensor parallelism alone); its first rank
    // sends a pipelined rank 0 the head's hidden rows and the logits it asked for.
    worker.mtp = [&, H, V](const ForwardBatch& batch, const float* hidden, const float* embedded, bool with_logits) {
      if (!tp_.last_stage()) return;
      const bool sends = tp_.sends_last_stage();  // a pipelined rank 0 waits for the results
      if (sends && with_logits) mtp_logits_.resize(static_cast<size_t>(logit_rows(batch) * V));
      mtp_local(batch, hidden, embedded, sends && with_logits ? mtp_logits_.data() : nullptr, with_logits);
      if (!sends) return;
      tp_.send_to_first(xn_.data(), mtp_rows_ * H);
      if (with_logits) tp_.send_to_first(mtp_logits_.data(), mtp_rows_ * V);
    };
    worker.mtp_kv = mtp_kv_config();
  }
  tp_.serve(cfg_, worker);
}

void HybridModel::forward_local(const ForwardBatch& batch, float* logits) {
  tp_.run_stages(batch, logits, cfg_.vocab_size, cfg_.hidden_size,
                 [&](const ForwardBatch& part, float* part_logits) { forward_part(part, part_logits); });
}

// This rank's layers over one (micro-)batch: embedded here or received from the previous
// stage; sent on, or (last stage) turned into logits.
void HybridModel::forward_part(const ForwardBatch& batch, float* logits) {
  flat_.build(batch, cfg_.vocab_size, batch.kv->block_size());
  const int64_t n = flat_.size();
  if (n == 0) return;
  for (const SeqSlice& seq : batch.seqs)
    if (seq.pos == 0) batch.states->zero(seq.state_slot);
  const int64_t H = cfg_.hidden_size;
  ensure_buffers(n);

  if (tp_.first_stage()) tp_.embed(embed_, flat_.ids, H, x_.data());
  else tp_.recv_from_previous_stage(x_.data(), n * H);
  const int64_t half = rope_.dim() / 2;
  for (int64_t t = 0; t < n; ++t) rope_.angles(flat_.pos[static_cast<size_t>(t)], &cos_[t * half], &sin_[t * half]);

  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const HybridLayer& L = layers_[l];
    for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&x_[t * H], L.attn_norm.data(), eps, H, &xn_[t * H]);
    if (L.linear) linear_block(L, batch);
    else attention_block(L.attn, cfg_.kv_layer_index(static_cast<int64_t>(l)), batch);
    tp_.all_reduce(tmp_.data(), n * H);  // row-parallel out_proj / o_proj: sum the ranks' heads
    kernels::add_inplace(x_.data(), tmp_.data(), n * H);
    mlp_block(L, n);
    capture_taps(batch, tp_.first_layer() + static_cast<int64_t>(l), x_.data(), n, H);
  }
  if (!tp_.last_stage()) return tp_.send_to_next_stage(x_.data(), n * H);

  const auto rows = static_cast<int64_t>(flat_.logit_row.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = flat_.logit_row[static_cast<size_t>(r)];
    kernels::rmsnorm(&x_[t * H], final_norm_.data(), eps, H, &xn_[r * H]);
  }
  tp_.logits(lm_head_, xn_.data(), rows, cfg_.vocab_size, logits, pool_, batch.argmax_only);
  last_rows_ = rows;
  mtp_rows_ = 0;
}

void HybridModel::embed_rows(std::span<const int32_t> ids, float* out) const {
  if (!tp_.active()) return embedding_rows(embed_, cfg_.vocab_size, cfg_.hidden_size, ids, out);
  tp_.lend_embedding_rows(embed_, ids, cfg_.hidden_size, cfg_.vocab_size, out);
}

void HybridModel::output_head(const float* hidden, int64_t rows, float* logits) {
  if (!tp_.active()) return lm_head_.matmul(hidden, rows, logits, pool_);
  tp_.lend_output_head(lm_head_, hidden, rows, cfg_.hidden_size, cfg_.vocab_size, logits, pool_);
}

void HybridModel::mtp_forward(const ForwardBatch& batch, const float* hidden, float* logits) {
  if (!mtp_available_) fail("the MTP head cannot run: ", mtp_status_);
  if (!complete_) fail("the model was loaded with missing or mismatched tensors and cannot run");
  if (batch.kv == nullptr || batch.kv->num_layers() != 1)
    fail("mtp_forward: the batch needs a one-layer KV pool (HybridModel::mtp_kv_config)");
  flat_.build(batch, cfg_.vocab_size, batch.kv->block_size());
  if (flat_.size() == 0) return;
  if (!tp_.active()) return mtp_local(batch, hidden, nullptr, logits, logits != nullptr);
  tp_.check_lend({}, cfg_.vocab_size);
  const int64_t H = cfg_.hidden_size;
  if (tp_.stages() == 1)
    return tp_.lend_mtp(batch, hidden, nullptr, H, logits != nullptr,
                        [&] { mtp_local(batch, hidden, nullptr, logits, logits != nullptr); });
  // Pipeline stages: the head runs on the last stage, the embedding lives on the first (here).
  const std::vector<int32_t>& ids = flat_.ids;  // lending the embedding leaves flat_ as it is
  const auto rows = static_cast<int64_t>(flat_.logit_row.size());
  std::vector<float> embedded(ids.size() * static_cast<size_t>(H));
  embed_rows(ids, embedded.data());
  tp_.lend_mtp(batch, hidden, embedded.data(), H, logits != nullptr, [&] {
    ensure_buffers(static_cast<int64_t>(ids.size()));
    tp_.recv_from_last(xn_.data(), rows * H);
    if (logits != nullptr) tp_.recv_from_last(logits, rows * cfg_.vocab_size);
    last_rows_ = 0;
    mtp_rows_ = rows;
  });
}

// The head on this rank's slices (every rank of a split model runs it together).
void HybridModel::mtp_local(const ForwardBatch& batch, const float* hidden, const float* embedded, float* logits,
                            bool with_logits) {
  flat_.build(batch, cfg_.vocab_size, batch.kv->block_size());
  const int64_t n = flat_.size(), H = cfg_.hidden_size;
  if (n == 0) return;
  ensure_buffers(n);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  // x = fc([norm_e(embed(t_{i+1})); norm_h(h_i)])
  if (embedded != nullptr) std::copy_n(embedded, n * H, tmp_.data());  // looked up by the first stage
  else if (tp_.active()) tp_.embed(embed_, flat_.ids, H, tmp_.data());  // vocabulary-parallel rows
  else
    for (int64_t t = 0; t < n; ++t) embed_.dequantize_row(flat_.ids[static_cast<size_t>(t)], &tmp_[t * H]);
  for (int64_t t = 0; t < n; ++t) {
    float* row = &mtp_in_[t * 2 * H];
    kernels::rmsnorm(&tmp_[t * H], mtp_.norm_embedding.data(), eps, H, row);
    kernels::rmsnorm(hidden + t * H, mtp_.norm_hidden.data(), eps, H, row + H);
  }
  mtp_.fc.matmul(mtp_in_.data(), n, x_.data(), pool_);
  const int64_t half = rope_.dim() / 2;
  for (int64_t t = 0; t < n; ++t) rope_.angles(flat_.pos[static_cast<size_t>(t)], &cos_[t * half], &sin_[t * half]);
  const HybridLayer& L = mtp_.layer;
  for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&x_[t * H], L.attn_norm.data(), eps, H, &xn_[t * H]);
  attention_block(L.attn, /*kv_layer=*/0, batch);
  tp_.all_reduce(tmp_.data(), n * H);  // row-parallel o_proj: sum the ranks' heads
  kernels::add_inplace(x_.data(), tmp_.data(), n * H);
  mlp_block(L, n);
  const auto rows = static_cast<int64_t>(flat_.logit_row.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = flat_.logit_row[static_cast<size_t>(r)];
    kernels::rmsnorm(&x_[t * H], mtp_.norm.data(), eps, H, &xn_[r * H]);
  }
  if (with_logits) tp_.logits(lm_head_, xn_.data(), rows, cfg_.vocab_size, logits, pool_);
  last_rows_ = 0;  // xn_ no longer holds the target's hidden states
  mtp_rows_ = rows;
}

void HybridModel::final_norm_rows(const float* x, int64_t n, float* out) const {
  const int64_t H = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(x + t * H, final_norm_.data(), eps, H, out + t * H);
}

void HybridModel::linear_block(const HybridLayer& L, const ForwardBatch& batch) {
  gdn_forward(L.gdn, gdn_shape_, L.state_offset, batch, flat_, xn_.data(), tmp_.data(), gdn_mode_, gdn_scratch_,
              pool_);
}

// xn_ holds the normed input; leaves the block's output in tmp_.
void HybridModel::attention_block(const GatedAttentionWeights& A, int kv_layer, const ForwardBatch& batch) {
  const int64_t n = flat_.size();
  const int64_t hd = cfg_.head_dim, nh = cfg_.num_heads, nkv = cfg_.num_kv_heads;
  const int64_t q_dim = nh * hd, kv_dim = nkv * hd;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  A.wq.matmul(xn_.data(), n, qg_.data(), pool_);  // [n, nh, 2, hd]
  A.wk.matmul(xn_.data(), n, k_.data(), pool_);
  A.wv.matmul(xn_.data(), n, v_.data(), pool_);
  const int64_t half = rope_.dim() / 2;
  for (int64_t t = 0; t < n; ++t) {
    float* q = &q_[t * q_dim];
    float* gate = &gate_[t * q_dim];
    float* k = &k_[t * kv_dim];
    for (int64_t h = 0; h < nh; ++h) {
      const float* src = &qg_[(t * nh + h) * 2 * hd];
      kernels::rmsnorm(src, A.q_norm.data(), eps, hd, q + h * hd);
      std::copy(src + hd, src + 2 * hd, gate + h * hd);
    }
    for (int64_t h = 0; h < nkv; ++h) kernels::rmsnorm(k + h * hd, A.k_norm.data(), eps, hd, k + h * hd);
    rope_.apply(q, nh, hd, &cos_[t * half], &sin_[t * half]);
    rope_.apply(k, nkv, hd, &cos_[t * half], &sin_[t * half]);
  }
  const LayerKv kv{batch.kv, kv_layer, false};  // no sliding layers: every KV layer in the main pool
  store_kv(kv, batch, flat_, k_.data(), v_.data(), kv_dim);
  const AttentionShape shape{nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  paged_attention(kv, batch, flat_, shape, q_.data(), attn_.data(), pool_, scores_);
  for (int64_t i = 0; i < n * q_dim; ++i) attn_[i] *= sigmoid(gate_[i]);
  A.wo.matmul(attn_.data(), n, tmp_.data(), pool_);
}

void HybridModel::mlp_block(const HybridLayer& L, int64_t n) {
  const int64_t H = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&x_[t * H], L.ffn_norm.data(), eps, H, &xn_[t * H]);
  feed_forward(L.ffn, xn_.data(), n, tmp_.data(), pool_, ffn_scratch_);
  tp_.all_reduce(tmp_.data(), n * H);  // row-parallel down / the ranks' experts: sum
  kernels::add_inplace(x_.data(), tmp_.data(), n * H);
}

}  // namespace zen
