#include "spec/dflash/drafter.h"

#include <algorithm>
#include <chrono>
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
  // DFlash 2: all four keys or none.
  const char* v2_keys[] = {"conv_kernel_size", "conv_group_size", "selector_top_k", "selector_rank"};
  int64_t* v2_values[] = {&c.conv_kernel, &c.conv_group, &c.selector_top_k, &c.selector_rank};
  int given = 0;
  for (int i = 0; i < 4; ++i)
    if (const Json* v = draft_value(root, v2_keys[i])) {
      if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > 1 << 20)
        fail("drafter config.json: '", v2_keys[i], "' must be a positive integer, got ", v->dump());
      *v2_values[i] = v->get<int64_t>();
      ++given;
    }
  if (given != 0 && given != 4)
    fail("drafter config.json: a DFlash 2 drafter needs conv_kernel_size, conv_group_size, selector_top_k and selector_rank");
  if (c.v2() && (c.conv_kernel > 8 || c.decoder.hidden_size % c.conv_group != 0))
    fail("drafter config.json: conv_kernel_size ", c.conv_kernel, " (at most 8) and conv_group_size ", c.conv_group,
         " (must divide hidden_size ", c.decoder.hidden_size, ")");
  if (c.v2() && c.selector_top_k > c.decoder.vocab_size)
    fail("drafter config.json: selector_top_k ", c.selector_top_k, " exceeds the vocabulary of ", c.decoder.vocab_size);
  c.input_embedding_scale = number_or(root, "input_embedding_scale", 1.0f);
  c.output_multiplier = number_or(root, "output_multiplier", 1.0f);
  c.logit_softcap = number_or(root, "final_logit_softcapping", 0.0f);
  return c;
}

void DrafterConfig::check_fits(const ModelConfig& target, int64_t target_layers) const {
  if (decoder.hidden_size != target.hidden_size)
    fail("drafter hidden_size ", decoder.hidden_size, " does not fit the target's ", target.hidden_size);
  if (decoder.vocab_size != target.vocab_size)
    fail("drafter vocab_size ", decoder.vocab_size, " does not fit the target's ", target.vocab_size);
  for (int32_t id : target_layer_ids)
    if (id < 0 || id >= target_layers)
      fail("drafter target_layer_ids entry ", id, " is outside the target's ", target_layers, " layers");
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

ModelConfig DrafterConfig::kv_config(bool sliding) const {
  ModelConfig c = decoder;
  c.num_layers = 0;
  for (int64_t l = 0; l < decoder.num_layers; ++l) c.num_layers += (decoder.attention_window(l) > 0) == sliding ? 1 : 0;
  c.attention_windows.clear();
  c.layer_types.clear();
  return c;
}

int DrafterConfig::store_index(int64_t layer) const {
  const bool sliding = decoder.attention_window(layer) > 0;
  int index = 0;
  for (int64_t l = 0; l < layer; ++l) index += (decoder.attention_window(l) > 0) == sliding ? 1 : 0;
  return index;
}

int64_t DrafterConfig::max_window() const {
  int64_t w = 0;
  for (int64_t l = 0; l < decoder.num_layers; ++l) w = std::max(w, decoder.attention_window(l));
  return w;
}

std::unique_ptr<Drafter> Drafter::load(const std::string& folder, Model& target, bool q8_0) {
  auto ckpt = Checkpoint::open(folder);
  if (ckpt->hf_config().is_null()) fail(folder, ": a DFlash drafter is a folder with config.json and safetensors");
  DrafterConfig cfg = DrafterConfig::from_json(ckpt->hf_config());
  cfg.check_fits(target.config(), target.layer_count());
  auto d = std::unique_ptr<Drafter>(new Drafter(std::move(ckpt), std::move(cfg), target));
  if (q8_0) {
    d->fc_.requantize_q8_0();
    d->selector_proj_.requantize_q8_0();
    for (Layer& L : d->layers_)
      for (Linear* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down, &L.attn_kernel, &L.mlp_kernel})
        if (m->valid()) m->requantize_q8_0();
  }
  return d;
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
    if (cfg_.v2()) {
      const int64_t K = cfg_.conv_kernel, G = H / cfg_.conv_group;
      L.attn_base = take_f32_vector(c, p + "attention_conv.base_kernel", {2, K, H});
      L.mlp_base = take_f32_vector(c, p + "mlp_conv.base_kernel", {2, K, H});
      L.attn_kernel = matrix(p + "attention_conv.kernel_projection.weight", {2 * K * G, H});
      L.mlp_kernel = matrix(p + "mlp_conv.kernel_projection.weight", {2 * K * G, H});
    }
  }
  if (cfg_.v2()) {
    // Published checkpoints store the codebooks without ".weight" (the reference maps them).
    const int64_t V = d.vocab_size, r = cfg_.selector_rank;
    auto codebook = [&](const std::string& name) {
      const std::string key = "candidate_selector." + name;
      return take_f32_vector(c, c.has(key) ? key : key + ".weight", {V, r});
    };
    pred_codebook_ = codebook("predecessor_codebook");
    succ_codebook_ = codebook("successor_codebook");
    selector_proj_ = matrix("candidate_selector.hidden_projection.weight", {r, H});
  }
  c.ignore(R"(.*rotary_emb\.inv_freq)", "recomputed from the config");
  c.require_clean();
}

void Drafter::context_kv(const float* taps, std::span<const int64_t> positions, std::vector<std::vector<float>>& k,
                         std::vector<std::vector<float>>& v) const {
  const ModelConfig& d = cfg_.decoder;
  const auto n = static_cast<int64_t>(positions.size());
  const int64_t H = d.hidden_size, hd = d.head_dim, nkv = d.num_kv_heads, kv_dim = nkv * hd;
  const float eps = static_cast<float>(d.rms_norm_eps);
  ThreadPool& pool = target_.pool();
  std::vector<float> c(static_cast<size_t>(n * H));  // [n, H]
  fc_.matmul(taps, n, c.data(), pool);
  for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&c[t * H], hidden_norm_.data(), eps, H, &c[t * H]);
  k.resize(layers_.size());
  v.resize(layers_.size());
  std::vector<float> cos(static_cast<size_t>(rope_.dim() / 2)), sin(cos.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    k[l].resize(static_cast<size_t>(n * kv_dim));
    v[l].resize(k[l].size());
    L.wk.matmul(c.data(), n, k[l].data(), pool);
    L.wv.matmul(c.data(), n, v[l].data(), pool);
    for (int64_t t = 0; t < n; ++t) {
      float* kt = &k[l][static_cast<size_t>(t * kv_dim)];
      for (int64_t h = 0; h < nkv; ++h) kernels::rmsnorm(kt + h * hd, L.k_norm.data(), eps, hd, kt + h * hd);
      rope_.angles(positions[static_cast<size_t>(t)], cos.data(), sin.data());
      rope_.apply(kt, nkv, hd, cos.data(), sin.data());
    }
  }
}

void Drafter::extend(DraftContext& ctx, const float* taps, int64_t n) const {
  const ModelConfig& d = cfg_.decoder;
  const int64_t kv_dim = d.num_kv_heads * d.head_dim;
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[static_cast<size_t>(t)] = ctx.length + t;
  std::vector<std::vector<float>> k, v;
  context_kv(taps, positions, k, v);
  ctx.k.resize(layers_.size());
  ctx.v.resize(layers_.size());
  ctx.first.resize(layers_.size(), 0);
  ctx.window.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    ctx.window[l] = d.attention_window(static_cast<int64_t>(l));
    ctx.k[l].insert(ctx.k[l].end(), k[l].begin(), k[l].end());
    ctx.v[l].insert(ctx.v[l].end(), v[l].begin(), v[l].end());
    // A sliding layer: the next block's anchor (at ctx.length + n) sees window - 1 of these.
    const int64_t window = ctx.window[l];
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

namespace {

// Row pointers of one layer's context K/V, positions [lo, view.length), one head: keys[j - lo]
// (nullptr where the window store lacks the row).
void context_rows(const ContextView& view, const DrafterConfig& cfg, int layer, int64_t kv_dim, int64_t hd, int64_t g,
                  int64_t lo, std::vector<const float*>& keys, std::vector<const float*>& values) {
  keys.clear();
  values.clear();
  if (view.ctx != nullptr) {
    const DraftContext& c = *view.ctx;
    const int64_t first = c.first.empty() ? 0 : c.first[static_cast<size_t>(layer)];
    ZEN_CHECK(lo >= first, "draft: layer ", layer, " needs position ", lo, " but holds from ", first);
    for (int64_t j = lo; j < view.length; ++j) {
      keys.push_back(&c.k[static_cast<size_t>(layer)][static_cast<size_t>((j - first) * kv_dim + g * hd)]);
      values.push_back(&c.v[static_cast<size_t>(layer)][static_cast<size_t>((j - first) * kv_dim + g * hd)]);
    }
    return;
  }
  const int64_t bs = view.pool->block_size();
  ZEN_CHECK(static_cast<int64_t>(view.blocks.size()) * bs >= view.length, "draft: ", view.length,
            " context positions but a block table of ", view.blocks.size());
  const int index = cfg.store_index(layer);
  if (cfg.decoder.attention_window(layer) > 0) {
    ZEN_CHECK(view.window != nullptr && view.window->block_size() == bs, "draft: sliding layer ", layer,
              " needs the window store");
    for (int64_t j = lo; j < view.length; ++j) {
      const int32_t block = view.blocks[static_cast<size_t>(j / bs)];
      keys.push_back(view.window->k_row(index, block, j % bs, g));
      values.push_back(view.window->v_row(index, block, j % bs, g));
    }
    return;
  }
  for (int64_t j = lo; j < view.length;) {
    const int64_t slot = j % bs, count = std::min(bs - slot, view.length - j);
    const int32_t block = view.blocks[static_cast<size_t>(j / bs)];
    int64_t stride = 0;
    const float* k = view.pool->k_rows_f32(index, block, slot, count, g, nullptr, &stride);
    const float* v = view.pool->v_rows_f32(index, block, slot, count, g, nullptr, &stride);
    for (int64_t i = 0; i < count; ++i) {
      keys.push_back(k + i * stride);
      values.push_back(v + i * stride);
    }
    j += count;
  }
}

}  // namespace

void Drafter::attention(int layer, std::span<const BlockJob> jobs, const float* x, int64_t rows, float* out) const {
  const ModelConfig& d = cfg_.decoder;
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const int64_t hd = d.head_dim, nh = d.num_heads, nkv = d.num_kv_heads, group = nh / nkv;
  const int64_t q_dim = nh * hd, kv_dim = nkv * hd;
  const float eps = static_cast<float>(d.rms_norm_eps);
  ThreadPool& pool = target_.pool();
  std::vector<float> q(static_cast<size_t>(rows * q_dim)), k(static_cast<size_t>(rows * kv_dim)), v(k.size());
  L.wq.matmul(x, rows, q.data(), pool);
  L.wk.matmul(x, rows, k.data(), pool);
  L.wv.matmul(x, rows, v.data(), pool);
  std::vector<float> cos(static_cast<size_t>(rope_.dim() / 2)), sin(cos.size());
  int64_t r = 0;
  for (const BlockJob& job : jobs)
    for (int64_t t = 0; t < static_cast<int64_t>(job.block.size()); ++t, ++r) {
      float* qt = &q[r * q_dim];
      float* kt = &k[r * kv_dim];
      for (int64_t h = 0; h < nh; ++h) kernels::rmsnorm(qt + h * hd, L.q_norm.data(), eps, hd, qt + h * hd);
      for (int64_t h = 0; h < nkv; ++h) kernels::rmsnorm(kt + h * hd, L.k_norm.data(), eps, hd, kt + h * hd);
      rope_.angles(job.context.length + t, cos.data(), sin.data());
      rope_.apply(qt, nh, hd, cos.data(), sin.data());
      rope_.apply(kt, nkv, hd, cos.data(), sin.data());
    }
  const bool causal = cfg_.causal[static_cast<size_t>(layer)];
  const int64_t window = d.attention_window(layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> attn(static_cast<size_t>(rows * q_dim), 0.0f), p;
  std::vector<const float*> keys, values;
  int64_t row0 = 0;  // the job's first row
  for (const BlockJob& job : jobs) {
    const int64_t start = job.context.length, n = static_cast<int64_t>(job.block.size()), all = start + n;
    // The earliest key any of the block's rows sees.
    const int64_t lo_min = window > 0 ? std::max<int64_t>(0, start - window + 1) : 0;
    for (int64_t g = 0; g < nkv; ++g) {
      // Keys [lo_min, all): the context's rows, then the block's own.
      context_rows(job.context, cfg_, layer, kv_dim, hd, g, std::min(lo_min, start), keys, values);
      for (int64_t t = 0; t < n; ++t) {
        keys.push_back(&k[(row0 + t) * kv_dim + g * hd]);
        values.push_back(&v[(row0 + t) * kv_dim + g * hd]);
      }
      p.resize(keys.size());
      for (int64_t t = 0; t < n; ++t) {
        const int64_t qpos = start + t;
        // Visible keys: [lo, hi).
        int64_t lo = 0, hi = causal ? qpos + 1 : all;
        if (window > 0) {
          lo = std::max<int64_t>(0, qpos - window + 1);
          if (!causal) hi = std::min(all, qpos + window);
        }
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* qh = &q[(row0 + t) * q_dim + h * hd];
          float m = -INFINITY;
          // A row the window store lacks is skipped (its key never scored).
          for (int64_t j = lo; j < hi; ++j) {
            const auto i = static_cast<size_t>(j - lo_min);
            if (keys[i] != nullptr) m = std::max(m, p[i] = kernels::dot_f32(qh, keys[i], hd) * scale);
          }
          double z = 0;
          for (int64_t j = lo; j < hi; ++j) {
            const auto i = static_cast<size_t>(j - lo_min);
            if (keys[i] != nullptr) z += (p[i] = std::exp(p[i] - m));
          }
          float* o = &attn[static_cast<size_t>((row0 + t) * q_dim + h * hd)];
          for (int64_t j = lo; j < hi; ++j) {
            const auto i = static_cast<size_t>(j - lo_min);
            if (keys[i] != nullptr) kernels::axpy_f32(static_cast<float>(p[i] / z), values[i], o, hd);
          }
        }
      }
    }
    row0 += n;
  }
  L.wo.matmul(attn.data(), rows, out, pool);
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
  if (static_cast<int64_t>(ctx.k.size()) != cfg_.decoder.num_layers && ctx.length > 0)
    fail("draft: the context belongs to another drafter");
  const BlockJob job{ContextView{.length = ctx.length, .ctx = &ctx}, block};
  draft(std::span<const BlockJob>(&job, 1), logits);
}

void Drafter::draft(std::span<const BlockJob> jobs, float* logits, Timing* timing, float* hidden) const {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const ModelConfig& d = cfg_.decoder;
  std::vector<int32_t> tokens;  // [rows] every job's block
  for (const BlockJob& job : jobs) {
    if (job.block.size() < 2) fail("draft: a block needs the anchor and at least one position to draft");
    if ((job.context.ctx == nullptr) == (job.context.pool == nullptr)) fail("draft: a block's context needs one source");
    tokens.insert(tokens.end(), job.block.begin(), job.block.end());
  }
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t H = d.hidden_size;
  const float eps = static_cast<float>(d.rms_norm_eps);
  std::vector<float> h(static_cast<size_t>(n * H)), xn(h.size()), tmp(h.size());  // [n, H]
  target_.embed_rows(tokens, h.data());
  if (cfg_.input_embedding_scale != 1.0f)
    for (float& x : h) x *= cfg_.input_embedding_scale;
  // DFlash 2: dyn [n, 2 x K x groups] of the block (before / after), conv [n, H] scratch.
  const int64_t K = cfg_.conv_kernel, dyn_width = cfg_.v2() ? 2 * K * (H / cfg_.conv_group) : 0;
  std::vector<float> dyn(static_cast<size_t>(n * dyn_width)), conv(cfg_.v2() ? h.size() : 0);
  // A sublayer (attention or MLP) with its convolutions: h += after(f(before(norm(h)))).
  auto sublayer = [&](const std::vector<float>& norm, const Linear& kernel, const std::vector<float>& base, auto&& f) {
    for (int64_t t = 0; t < n; ++t) kernels::rmsnorm(&h[t * H], norm.data(), eps, H, &xn[t * H]);
    if (!cfg_.v2()) {
      f(xn.data(), tmp.data());
    } else {
      kernel.matmul(xn.data(), n, dyn.data(), target_.pool());
      convolve(jobs, xn.data(), dyn.data(), 0, base.data(), conv.data());
      f(conv.data(), xn.data());
      convolve(jobs, xn.data(), dyn.data(), 1, base.data() + K * H, tmp.data());
    }
    kernels::add_inplace(h.data(), tmp.data(), n * H);
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    sublayer(L.attn_norm, L.attn_kernel, L.attn_base,
             [&](const float* x, float* out) { attention(static_cast<int>(l), jobs, x, n, out); });
    sublayer(L.ffn_norm, L.mlp_kernel, L.mlp_base, [&](const float* x, float* out) { mlp(L, x, n, out); });
  }
  // Rows 1 .. drafts() of each block, packed.
  int64_t out = 0, r = 0;
  for (const BlockJob& job : jobs) {
    for (int64_t t = 1; t <= job.drafts(); ++t) kernels::rmsnorm(&h[(r + t) * H], final_norm_.data(), eps, H, &xn[out++ * H]);
    r += static_cast<int64_t>(job.block.size());
  }
  const int64_t V = d.vocab_size;
  const auto t1 = Clock::now();
  if (hidden != nullptr) std::copy_n(xn.begin(), out * H, hidden);
  target_.output_head(xn.data(), out, logits);
  for (int64_t i = 0; i < out * V; ++i) {
    float x = logits[i] * cfg_.output_multiplier;
    if (cfg_.logit_softcap > 0) x = std::tanh(x / cfg_.logit_softcap) * cfg_.logit_softcap;
    logits[i] = x;
  }
  if (timing != nullptr) {
    timing->layers = std::chrono::duration<double>(t1 - t0).count();
    timing->head = std::chrono::duration<double>(Clock::now() - t1).count();
  }
}

void Drafter::convolve(std::span<const BlockJob> jobs, const float* x, const float* dyn, int which, const float* base,
                       float* out) const {
  const int64_t H = cfg_.decoder.hidden_size, K = cfg_.conv_kernel, gs = cfg_.conv_group, G = H / gs;
  int64_t row0 = 0;
  for (const BlockJob& job : jobs) {
    const auto n = static_cast<int64_t>(job.block.size());
    for (int64_t t = 0; t < n; ++t) {
      float* o = out + (row0 + t) * H;
      std::fill_n(o, H, 0.0f);
      const float* d = dyn + (row0 + t) * 2 * K * G + which * K * G;  // [K, G] at position t
      for (int64_t off = 0; off < K && off <= t; ++off) {
        const float* xs = x + (row0 + t - off) * H;
        const float* b = base + off * H;
        for (int64_t c = 0; c < H; ++c) o[c] += (b[c] + d[off * G + c / gs]) * xs[c];
      }
    }
    row0 += n;
  }
}

std::vector<int32_t> Drafter::select(const float* hidden, const float* logits, int64_t rows, int32_t anchor,
                                     const Choose& choose) const {
  ZEN_CHECK(cfg_.v2(), "select: a DFlash 1 drafter has no candidate selector");
  const int64_t V = cfg_.decoder.vocab_size, r = cfg_.selector_rank;
  const auto k = static_cast<size_t>(cfg_.selector_top_k);
  std::vector<float> proj(static_cast<size_t>(rows * r));  // [rows, r]
  selector_proj_.matmul(hidden, rows, proj.data(), target_.pool());
  std::vector<int32_t> ids(static_cast<size_t>(V)), candidates(k), path;
  std::vector<float> scores(k), mix(static_cast<size_t>(r));
  int32_t previous = anchor;
  for (int64_t pos = 0; pos < rows; ++pos) {
    const float* row = logits + pos * V;
    for (int32_t i = 0; i < static_cast<int32_t>(V); ++i) ids[static_cast<size_t>(i)] = i;
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    // mix = pred[previous] * proj(hidden): the part of each score that is the same for all.
    const float* pred = &pred_codebook_[static_cast<size_t>(previous * r)];
    for (int64_t j = 0; j < r; ++j) mix[static_cast<size_t>(j)] = pred[j] * proj[static_cast<size_t>(pos * r + j)];
    for (size_t i = 0; i < k; ++i) {
      candidates[i] = ids[i];
      scores[i] = row[ids[i]] + kernels::dot_f32(mix.data(), &succ_codebook_[static_cast<size_t>(ids[i] * r)], r);
    }
    const size_t chosen = choose(scores, candidates, pos);
    ZEN_CHECK(chosen < k, "select: candidate ", chosen, " of ", k);
    previous = candidates[chosen];
    path.push_back(previous);
  }
  return path;
}

}  // namespace zen::spec::dflash
