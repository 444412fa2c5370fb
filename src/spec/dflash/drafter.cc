#include "spec/dflash/drafter.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "kernels/cpu/ops.h"
#include "model/gated_delta_net.h"

namespace zen::spec::dflash {
namespace {

using Json = nlohmann::json;

// dflash_config's key, or the same key at the top level (the reference reads both).
const Json* draft_value(const Json& root, const char* key) {
  if (auto d = root.find("dflash_config"); d != root.end() && d->is_object())
    if (auto it = d->find(key); it != d->end() && !it->is_null()) return &*it;
  if (auto it = root.find(key); it != root.end() && !it->is_null()) return &*it;
  return nullptr;
}

float number_or(const Json& root, const char* key, float fallback) {
  const Json* v = draft_value(root, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) fail("drafter config.json: '", key, "' must be a number, got ", v->dump());
  return v->get<float>();
}

// The reference's default taps: spread over the target's depth.
std::vector<int32_t> default_taps(int64_t target_layers, int64_t draft_layers) {
  if (draft_layers == 1) return {static_cast<int32_t>(target_layers / 2)};
  const double start = 1, span = static_cast<double>(target_layers - 3) - start;
  std::vector<int32_t> out;
  for (int64_t i = 0; i < draft_layers; ++i)
    out.push_back(static_cast<int32_t>(std::nearbyint(start + static_cast<double>(i) * span / static_cast<double>(draft_layers - 1))));
  return out;
}

}  // namespace

DrafterConfig DrafterConfig::from_json(const Json& root) {
  if (!root.is_object()) fail("drafter config.json: expected a JSON object");
  if (root.contains("conv_kernel_size") || root.contains("selector_rank") ||
      (root.contains("dflash_config") && (root["dflash_config"].contains("conv_kernel_size") ||
                                          root["dflash_config"].contains("selector_rank"))))
    fail("drafter config.json: a DFlash 2 drafter (dynamic convolutions, candidate selector) is not supported yet");
  DrafterConfig c;
  c.decoder = ModelConfig::from_hf(root);
  if (c.decoder.architecture != "qwen3")
    fail("drafter config.json: DFlash layers are Qwen3 layers, got model_type '", c.decoder.architecture, "'");
  const int64_t layers = c.decoder.num_layers;
  if (const Json* ids = draft_value(root, "target_layer_ids")) {
    if (!ids->is_array() || ids->empty()) fail("drafter config.json: 'target_layer_ids' must be a non-empty list");
    for (const Json& id : *ids) {
      if (!id.is_number_integer()) fail("drafter config.json: 'target_layer_ids' entries must be integers, got ", id.dump());
      c.target_layer_ids.push_back(id.get<int32_t>());
    }
  } else {
    const Json* n = draft_value(root, "num_target_layers");
    if (n == nullptr || !n->is_number_integer())
      fail("drafter config.json: neither 'target_layer_ids' nor 'num_target_layers' is given");
    c.target_layer_ids = default_taps(n->get<int64_t>(), layers);
  }
  const Json* mask = draft_value(root, "mask_token_id");
  if (mask == nullptr || !mask->is_number_integer()) fail("drafter config.json: 'mask_token_id' is missing");
  c.mask_token_id = mask->get<int32_t>();
  if (const Json* b = draft_value(root, "block_size")) {
    if (!b->is_number_integer() || b->get<int64_t>() < 2 || b->get<int64_t>() > 64)
      fail("drafter config.json: 'block_size' must be in [2, 64], got ", b->dump());
    c.block_size = b->get<int64_t>();
  }
  // Causality as the reference: sliding layers causal, full layers bidirectional inside the
  // block, unless is_causal says otherwise for all.
  std::vector<std::string> types(static_cast<size_t>(layers), "full_attention");
  if (auto it = root.find("layer_types"); it != root.end() && it->is_array() && static_cast<int64_t>(it->size()) == layers)
    for (size_t l = 0; l < types.size(); ++l) types[l] = (*it)[l].is_string() ? (*it)[l].get<std::string>() : "";
  const Json* is_causal = draft_value(root, "is_causal");
  for (const std::string& t : types) {
    if (t != "full_attention" && t != "sliding_attention") fail("drafter config.json: layer type '", t, "' is not supported");
    c.causal.push_back(is_causal != nullptr ? is_causal->get<bool>() : t == "sliding_attention");
  }
  c.input_embedding_scale = number_or(root, "input_embedding_scale", 1.0f);
  c.output_multiplier = number_or(root, "output_multiplier", 1.0f);
  c.logit_softcap = number_or(root, "final_logit_softcapping", 0.0f);
  return c;
}

void DrafterConfig::check_fits(const ModelConfig& target) const {
  if (decoder.hidden_size != target.hidden_size)
    fail("drafter hidden_size ", decoder.hidden_size, " does not fit the target's ", target.hidden_size);
  if (decoder.vocab_size != target.vocab_size)
    fail("drafter vocab_size ", decoder.vocab_size, " does not fit the target's ", target.vocab_size);
  for (int32_t id : target_layer_ids)
    if (id < 0 || id >= target.num_layers)
      fail("drafter target_layer_ids entry ", id, " is outside the target's ", target.num_layers, " layers");
  if (mask_token_id < 0 || mask_token_id >= target.vocab_size)
    fail("drafter mask_token_id ", mask_token_id, " is outside the target's vocabulary of ", target.vocab_size);
}

int64_t DrafterConfig::kv_bytes_per_token() const {
  const int64_t row = 2 * decoder.num_kv_heads * decoder.head_dim * static_cast<int64_t>(sizeof(float));
  int64_t full = 0;
  for (int64_t l = 0; l < decoder.num_layers; ++l) full += decoder.attention_window(l) == 0 ? row : 0;
  return full;
}

int64_t DrafterConfig::kv_bytes_sliding() const {
  const int64_t row = 2 * decoder.num_kv_heads * decoder.head_dim * static_cast<int64_t>(sizeof(float));
  int64_t bytes = 0;
  for (int64_t l = 0; l < decoder.num_layers; ++l) bytes += std::max<int64_t>(decoder.attention_window(l) - 1, 0) * row;
  return bytes;
}

std::unique_ptr<Drafter> Drafter::load(const std::string& folder, Model& target) {
  auto ckpt = Checkpoint::open(folder);
  if (ckpt->hf_config().is_null()) fail(folder, ": a DFlash drafter is a folder with config.json and safetensors");
  DrafterConfig cfg = DrafterConfig::from_json(ckpt->hf_config());
  cfg.check_fits(target.config());
  return std::unique_ptr<Drafter>(new Drafter(std::move(ckpt), std::move(cfg), target));
}

Drafter::Drafter(std::unique_ptr<Checkpoint> ckpt, DrafterConfig cfg, Model& target)
    : ckpt_(std::move(ckpt)), cfg_(std::move(cfg)), target_(target), rope_(cfg_.decoder) {
  Checkpoint& c = *ckpt_;
  const ModelConfig& d = cfg_.decoder;
  const int64_t H = d.hidden_size, I = d.intermediate_size, hd = d.head_dim;
  const int64_t q_dim = d.num_heads * hd, kv_dim = d.num_kv_heads * hd;
  const QuantConfig quant = QuantConfig::from_checkpoint(c);
  auto matrix = [&](const std::string& name, std::vector<int64_t> shape) { return Linear::bind(c, name, std::move(shape), quant); };
  fc_ = matrix("fc.weight", {H, cfg_.tap_width()});
  hidden_norm_ = take_f32_vector(c, "hidden_norm.weight", {H});
  final_norm_ = take_f32_vector(c, "norm.weight", {H});
  layers_.resize(static_cast<size_t>(d.num_layers));
  for (int64_t l = 0; l < d.num_layers; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    L.attn_norm = take_f32_vector(c, p + "input_layernorm.weight", {H});
    L.ffn_norm = take_f32_vector(c, p + "post_attention_layernorm.weight", {H});
    L.q_norm = take_f32_vector(c, p + "self_attn.q_norm.weight", {hd});
    L.k_norm = take_f32_vector(c, p + "self_attn.k_norm.weight", {hd});
    L.wq = matrix(p + "self_attn.q_proj.weight", {q_dim, H});
    L.wk = matrix(p + "self_attn.k_proj.weight", {kv_dim, H});
    L.wv = matrix(p + "self_attn.v_proj.weight", {kv_dim, H});
    L.wo = matrix(p + "self_attn.o_proj.weight", {H, q_dim});
    L.gate = matrix(p + "mlp.gate_proj.weight", {I, H});
    L.up = matrix(p + "mlp.up_proj.weight", {I, H});
    L.down = matrix(p + "mlp.down_proj.weight", {H, I});
  }
  c.ignore(R"(.*rotary_emb\.inv_freq)", "recomputed from the config");
  c.require_clean();
}

void Drafter::extend(DraftContext& ctx, const float* taps, int64_t n) const {
  const ModelConfig& d = cfg_.decoder;
  const int64_t H = d.hidden_size, hd = d.head_dim, nkv = d.num_kv_heads, kv_dim = nkv * hd;
  const float eps = static_cast<float>(d.rms_norm_eps);
  ThreadPool& pool = target_.pool();
  std::vector<float> c(static_cast<size_t>(n * H));  // [n, H]
  fc_.matmul(taps, n, c.data(), pool);
  for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&c[t * H], hidden_norm_.data(), eps, H, &c[t * H]);
  ctx.k.resize(layers_.size());
  ctx.v.resize(layers_.size());
  ctx.first.resize(layers_.size(), 0);
  ctx.window.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) ctx.window[l] = d.attention_window(static_cast<int64_t>(l));
  std::vector<float> k(static_cast<size_t>(n * kv_dim)), v(k.size());  // [n, kv_dim]
  std::vector<float> cos(static_cast<size_t>(rope_.dim() / 2)), sin(cos.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    L.wk.matmul(c.data(), n, k.data(), pool);
    L.wv.matmul(c.data(), n, v.data(), pool);
    for (int64_t t = 0; t < n; ++t) {
      float* kt = &k[t * kv_dim];
      for (int64_t h = 0; h < nkv; ++h) kernels::rmsnorm(kt + h * hd, L.k_norm.data(), eps, hd, kt + h * hd);
      rope_.angles(ctx.length + t, cos.data(), sin.data());
      rope_.apply(kt, nkv, hd, cos.data(), sin.data());
    }
    ctx.k[l].insert(ctx.k[l].end(), k.begin(), k.end());
    ctx.v[l].insert(ctx.v[l].end(), v.begin(), v.end());
    // A sliding layer: the next block's anchor (at ctx.length + n) sees window - 1 of these.
    const int64_t window = d.attention_window(static_cast<int64_t>(l));
    const int64_t drop = window > 0 ? ctx.length + n - (window - 1) - ctx.first[l] : 0;
    if (drop > 0) {
      ctx.k[l].erase(ctx.k[l].begin(), ctx.k[l].begin() + drop * kv_dim);
      ctx.v[l].erase(ctx.v[l].begin(), ctx.v[l].begin() + drop * kv_dim);
      ctx.first[l] += drop;
    }
  }
  ctx.length += n;
}

void Drafter::truncate(DraftContext& ctx, int64_t length) {
  length = std::max<int64_t>(length, 0);
  if (length >= ctx.length) return;
  for (size_t l = 0; l < ctx.k.size(); ++l) {
    const int64_t held = ctx.length - ctx.first[l];
    // What the next block would see: a sliding layer's window - 1 positions before `length`.
    const int64_t window = ctx.window.empty() ? 0 : ctx.window[l];
    const int64_t needed = window > 0 ? std::max<int64_t>(0, length - (window - 1)) : 0;
    if (ctx.first[l] > needed)
      fail("draft context: layer ", l, " no longer holds position ", needed, " (it holds from ", ctx.first[l], ")");
    const size_t row = held > 0 ? ctx.k[l].size() / static_cast<size_t>(held) : 0;
    ctx.k[l].resize(static_cast<size_t>(length - std::min(length, ctx.first[l])) * row);
    ctx.v[l].resize(ctx.k[l].size());
    ctx.first[l] = std::min(ctx.first[l], length);
  }
  ctx.length = length;
}

// out [n, H] = o_proj(attention of the block rows x [n, H] (normed) over the context K/V and
// the block's own, with the layer's mask).
void Drafter::attention(int layer, const DraftContext& ctx, const float* x, int64_t n, float* out) const {
  const ModelConfig& d = cfg_.decoder;
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const int64_t hd = d.head_dim, nh = d.num_heads, nkv = d.num_kv_heads, group = nh / nkv;
  const int64_t q_dim = nh * hd, kv_dim = nkv * hd, start = ctx.length, keys = start + n;
  const float eps = static_cast<float>(d.rms_norm_eps);
  ThreadPool& pool = target_.pool();
  std::vector<float> q(static_cast<size_t>(n * q_dim)), k(static_cast<size_t>(n * kv_dim)), v(k.size());
  L.wq.matmul(x, n, q.data(), pool);
  L.wk.matmul(x, n, k.data(), pool);
  L.wv.matmul(x, n, v.data(), pool);
  std::vector<float> cos(static_cast<size_t>(rope_.dim() / 2)), sin(cos.size());
  for (int64_t t = 0; t < n; ++t) {
    float* qt = &q[t * q_dim];
    float* kt = &k[t * kv_dim];
    for (int64_t h = 0; h < nh; ++h) kernels::rmsnorm(qt + h * hd, L.q_norm.data(), eps, hd, qt + h * hd);
    for (int64_t h = 0; h < nkv; ++h) kernels::rmsnorm(kt + h * hd, L.k_norm.data(), eps, hd, kt + h * hd);
    rope_.angles(start + t, cos.data(), sin.data());
    rope_.apply(qt, nh, hd, cos.data(), sin.data());
    rope_.apply(kt, nkv, hd, cos.data(), sin.data());
  }
  // Key j < start: the context's row (held from `first` on); else the block's row j - start.
  const int64_t first = ctx.first.empty() ? 0 : ctx.first[static_cast<size_t>(layer)];
  auto key = [&](int64_t j, int64_t g) {
    return j < start ? &ctx.k[static_cast<size_t>(layer)][static_cast<size_t>((j - first) * kv_dim + g * hd)]
                     : &k[(j - start) * kv_dim + g * hd];
  };
  auto value = [&](int64_t j, int64_t g) {
    return j < start ? &ctx.v[static_cast<size_t>(layer)][static_cast<size_t>((j - first) * kv_dim + g * hd)]
                     : &v[(j - start) * kv_dim + g * hd];
  };
  const bool causal = cfg_.causal[static_cast<size_t>(layer)];
  const int64_t window = d.attention_window(layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> attn(static_cast<size_t>(n * q_dim), 0.0f), p(static_cast<size_t>(keys));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t qpos = start + t;
    // Visible keys: [lo, hi).
    int64_t lo = 0, hi = causal ? qpos + 1 : keys;
    if (window > 0) {
      lo = std::max<int64_t>(0, qpos - window + 1);
      if (!causal) hi = std::min(keys, qpos + window);
    }
    ZEN_CHECK(lo >= first, "draft: layer ", layer, " needs position ", lo, " but holds from ", first);
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      const float* qh = &q[t * q_dim + h * hd];
      float m = -INFINITY;
      for (int64_t j = lo; j < hi; ++j) m = std::max(m, p[static_cast<size_t>(j)] = kernels::dot_f32(qh, key(j, g), hd) * scale);
      double z = 0;
      for (int64_t j = lo; j < hi; ++j) z += (p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - m));
      float* o = &attn[static_cast<size_t>(t * q_dim + h * hd)];
      for (int64_t j = lo; j < hi; ++j) kernels::axpy_f32(static_cast<float>(p[static_cast<size_t>(j)] / z), value(j, g), o, hd);
    }
  }
  L.wo.matmul(attn.data(), n, out, pool);
}

void Drafter::mlp(const Layer& L, const float* x, int64_t n, float* out) const {
  const int64_t I = cfg_.decoder.intermediate_size;
  ThreadPool& pool = target_.pool();
  std::vector<float> gate(static_cast<size_t>(n * I)), up(gate.size());
  L.gate.matmul(x, n, gate.data(), pool);
  L.up.matmul(x, n, up.data(), pool);
  kernels::silu_mul(gate.data(), up.data(), n * I, gate.data());
  L.down.matmul(gate.data(), n, out, pool);
}

void Drafter::draft(const DraftContext& ctx, std::span<const int32_t> block, float* logits) const {
  const ModelConfig& d = cfg_.decoder;
  const auto n = static_cast<int64_t>(block.size());
  if (n < 2) fail("draft: a block needs the anchor and at least one position to draft");
  if (static_cast<int64_t>(ctx.k.size()) != d.num_layers && ctx.length > 0) fail("draft: the context belongs to another drafter");
  const int64_t H = d.hidden_size;
  const float eps = static_cast<float>(d.rms_norm_eps);
  std::vector<float> h(static_cast<size_t>(n * H)), xn(h.size()), tmp(h.size());  // [n, H]
  target_.embed_rows(block, h.data());
  if (cfg_.input_embedding_scale != 1.0f)
    for (float& x : h) x *= cfg_.input_embedding_scale;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&h[t * H], L.attn_norm.data(), eps, H, &xn[t * H]);
    attention(static_cast<int>(l), ctx, xn.data(), n, tmp.data());
    kernels::add_inplace(h.data(), tmp.data(), n * H);
    for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&h[t * H], L.ffn_norm.data(), eps, H, &xn[t * H]);
    mlp(L, xn.data(), n, tmp.data());
    kernels::add_inplace(h.data(), tmp.data(), n * H);
  }
  for (int64_t t = 1; t < n; ++t) kernels::rmsnorm(&h[t * H], final_norm_.data(), eps, H, &xn[(t - 1) * H]);
  const int64_t V = d.vocab_size;
  target_.output_head(xn.data(), n - 1, logits);
  for (int64_t i = 0; i < (n - 1) * V; ++i) {
    float x = logits[i] * cfg_.output_multiplier;
    if (cfg_.logit_softcap > 0) x = std::tanh(x / cfg_.logit_softcap) * cfg_.logit_softcap;
    logits[i] = x;
  }
}

}  // namespace zen::spec::dflash
