#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "io/gguf.h"

namespace zen {
namespace {

using nlohmann::json;

// Most decoder layers a config may declare (validate() refuses more). Checked as soon as the
// count is read: a per-layer schedule is built from it before validate() runs.
constexpr int64_t kMaxLayers = 1024;

// Reads an integer field; throws naming the key when it has the wrong type.
int64_t get_int(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) fail("config.json: '", key, "' must be an integer, got ", it->dump());
  return it->get<int64_t>();
}

double get_num(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) fail("config.json: '", key, "' must be a number, got ", it->dump());
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail("config.json: '", key, "' must be a boolean, got ", it->dump());
  return it->get<bool>();
}

std::string get_str(const json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) fail("config.json: '", key, "' must be a string, got ", it->dump());
  return it->get<std::string>();
}

std::vector<int32_t> token_id_list(const json& v) {
  std::vector<int32_t> ids;
  if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
  if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
  return ids;
}

// Architecture name from "model_type" or the first entry of "architectures".
std::string hf_architecture(const json& j) {
  std::string model_type = get_str(j, "model_type", "");
  if (!model_type.empty()) return model_type;
  auto it = j.find("architectures");
  if (it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    const std::string a = (*it)[0].get<std::string>();
    if (a == "LlamaForCausalLM") return "llama";
    if (a == "Qwen2ForCausalLM") return "qwen2";
    if (a == "Qwen3ForCausalLM") return "qwen3";
    if (a == "Qwen3MoeForCausalLM") return "qwen3_moe";
    if (a == "Qwen2MoeForCausalLM") return "qwen2_moe";
    if (a == "Qwen3NextForCausalLM") return "qwen3_next";
    if (a == "Qwen3_5ForCausalLM" || a == "Qwen3_5ForConditionalGeneration") return "qwen3_5";
    if (a == "Qwen3_5MoeForCausalLM" || a == "Qwen3_5MoeForConditionalGeneration") return "qwen3_5_moe";
    return a;
  }
  fail("config.json: neither 'model_type' nor 'architectures' names the architecture");
}

// Rope scaling lives in "rope_scaling" (transformers 4.x) or "rope_parameters" (5.x, which
// also carries rope_theta).
void read_rope(const json& j, ModelConfig& c) {
  c.rope_theta = get_num(j, "rope_theta", 10000.0);
  const json* rope = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_object()) {
      rope = &*it;
      break;
    }
    if (it != j.end() && !it->is_null() && !it->is_object())
      fail("config.json: '", key, "' must be an object, got ", it->dump());
  }
  if (rope == nullptr) return;
  c.rope_theta = get_num(*rope, "rope_theta", c.rope_theta);
  std::string type = get_str(*rope, "rope_type", get_str(*rope, "type", "default"));
  if (type == "default") return;
  c.rope_factor = get_num(*rope, "factor", 1.0);
  if (c.rope_factor <= 0) fail("config.json: rope factor must be positive, got ", c.rope_factor);
  if (type == "linear") {
    c.rope_scaling = RopeScaling::Linear;
  } else if (type == "yarn") {
    c.rope_scaling = RopeScaling::Yarn;
    c.rope_original_max_position =
        get_int(*rope, "original_max_position_embeddings", c.max_position_embeddings);
    c.yarn_beta_fast = get_num(*rope, "beta_fast", 32.0);
    c.yarn_beta_slow = get_num(*rope, "beta_slow", 1.0);
    c.yarn_attention_factor = get_num(*rope, "attention_factor", 0.0);
    if (rope->contains("mscale") || rope->contains("mscale_all_dim"))
      fail("config.json: yarn 'mscale'/'mscale_all_dim' (DeepSeek-style) is not supported");
    if (rope->contains("truncate") && !get_bool(*rope, "truncate", true))
      fail("config.json: yarn 'truncate: false' is not supported");
  } else {
    fail("config.json: rope type '", type, "' is not supported (supported: default, linear, yarn)");
  }
}

// transformers' Qwen2 / Qwen3 rule: the window exists only with use_sliding_window; it applies
// to the layers layer_types names "sliding_attention", or without layer_types to layers from
// max_window_layers on.
void read_sliding_window(const nlohmann::json& j, ModelConfig& c) {
  if (!get_bool(j, "use_sliding_window", false)) return;
  std::vector<bool> sliding(static_cast<size_t>(std::max<int64_t>(c.num_layers, 0)), false);
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<int64_t>(it->size()) != c.num_layers)
      fail("config.json: 'layer_types' must list one type per layer (", c.num_layers, "), got ", it->dump());
    for (size_t l = 0; l < it->size(); ++l) {
      const auto& t = (*it)[l];
      if (!t.is_string() || (t != "full_attention" && t != "sliding_attention"))
        fail("config.json: layer type ", t.dump(), " is not supported here (full_attention, sliding_attention)");
      sliding[l] = t == "sliding_attention";
    }
  } else {
    const int64_t from = get_int(j, "max_window_layers", 28);  // transformers' default
    for (int64_t l = std::max<int64_t>(from, 0); l < c.num_layers; ++l) sliding[static_cast<size_t>(l)] = true;
  }
  if (std::find(sliding.begin(), sliding.end(), true) == sliding.end()) return;
  auto w = j.find("sliding_window");
  if (w == j.end() || w->is_null()) return;  // transformers: no window, full attention
  if (!w->is_number_integer() || w->get<int64_t>() <= 0)
    fail("config.json: sliding_window must be a positive integer, got ", w->dump());
  c.attention_windows.assign(sliding.size(), 0);
  for (size_t l = 0; l < sliding.size(); ++l)
    if (sliding[l]) c.attention_windows[l] = w->get<int64_t>();
}

bool is_hybrid_architecture(const std::string& a) {
  return a == "qwen3_5" || a == "qwen3_5_moe" || a == "qwen3_next";
}

// llama.cpp's qwen35 / qwen35moe (Qwen3.5 text decoders) and qwen3next metadata, as its
// converter writes it. Qwen3.5's text positions are equal in every MRoPE section, so the
// sections do not change the rotation.
void read_gguf_hybrid(const GgufFile& g, const std::string& a, ModelConfig& c) {
  auto need = [&](const std::string& key) {
    auto v = g.get_int(a + "." + key);
    if (!v) fail(g.path(), ": GGUF metadata lacks '", a, ".", key, "'");
    return *v;
  };
  c.architecture = a == "qwen35moe" ? "qwen3_5_moe" : a == "qwen3next" ? "qwen3_next" : "qwen3_5";
  c.zero_centered_norm = true;
  c.attn_output_gate = true;
  c.gguf_hybrid_layout = true;
  c.linear_v_heads_tiled = a != "qwen3next";  // the converter reorders Qwen3.5's value heads only
  c.linear_fused_projections = a == "qwen3next";  // ba fused (qkvz split or not: bind_gdn looks)
  c.linear_num_key_heads = need("ssm.group_count");
  c.linear_num_value_heads = need("ssm.time_step_rank");
  c.linear_key_head_dim = need("ssm.state_size");
  c.linear_conv_kernel_dim = need("ssm.conv_kernel");
  const int64_t inner = need("ssm.inner_size");
  if (c.linear_num_value_heads <= 0 || inner % c.linear_num_value_heads != 0)
    fail(g.path(), ": ", a, ".ssm.inner_size ", inner, " is not a multiple of ssm.time_step_rank ",
         c.linear_num_value_heads);
  c.linear_value_head_dim = inner / c.linear_num_value_heads;
  c.full_attention_interval = g.get_int(a + ".full_attention_interval").value_or(4);
  c.nextn_layers = g.get_int(a + ".nextn_predict_layers").value_or(0);
  if (c.nextn_layers < 0 || c.nextn_layers > kMaxLayers)
    fail(g.path(), ": ", a, ".nextn_predict_layers ", c.nextn_layers, " is implausible");
  if (g.find(a + ".attention.recurrent_layers") != nullptr)
    fail(g.path(), ": ", a, ".attention.recurrent_layers (an explicit layer schedule) is not supported yet");
  if (a == "qwen35moe" || a == "qwen3next") {
    // Every layer sparse (llama.cpp builds no dense MLP for these), top-k renormalised unless
    // expert_weights_norm says otherwise, with the shared expert.
    c.num_experts = need("expert_count");
    c.num_experts_per_tok = need("expert_used_count");
    c.moe_intermediate_size = need("expert_feed_forward_length");
    c.shared_expert_intermediate_size = g.get_int(a + ".expert_shared_feed_forward_length").value_or(0);
    c.norm_topk_prob = true;
    if (a == "qwen3next") c.norm_topk_prob = g.get_bool(a + ".expert_weights_norm").value_or(true);
    c.decoder_sparse_step = 1;
    if (auto scale = g.get_float(a + ".expert_weights_scale"); scale && *scale != 1.0)
      fail(g.path(), ": ", a, ".expert_weights_scale ", *scale, " is not supported (Qwen3.5-MoE has none)");
  }
}

// The hybrids' extra fields (qwen3_5 text part, qwen3_next); HF's defaults where absent.
void read_hybrid(const json& j, ModelConfig& c) {
  c.qk_norm = true;
  c.zero_centered_norm = true;
  c.attn_output_gate = get_bool(j, "attn_output_gate", true);
  if (!c.attn_output_gate) fail("config.json: attn_output_gate=false is not supported");
  c.linear_fused_projections = c.architecture == "qwen3_next";
  if (c.architecture == "qwen3_next") {
    c.read_moe_fields(j, /*norm_topk_default=*/true);
  } else if (c.architecture == "qwen3_5_moe") {
    // Every layer sparse, top-k always renormalised (Qwen3_5MoeDecoderLayer / TopKRouter);
    // there is no dense MLP, so intermediate_size only has to pass validation.
    c.read_moe_fields(j, /*norm_topk_default=*/true);
    c.norm_topk_prob = true;
    c.decoder_sparse_step = 1;
    c.mlp_only_layers.clear();
    if (c.intermediate_size <= 0) c.intermediate_size = c.moe_intermediate_size;
  }
  c.linear_num_key_heads = get_int(j, "linear_num_key_heads", 16);
  c.linear_num_value_heads = get_int(j, "linear_num_value_heads", 32);
  c.linear_key_head_dim = get_int(j, "linear_key_head_dim", 128);
  c.linear_value_head_dim = get_int(j, "linear_value_head_dim", 128);
  c.linear_conv_kernel_dim = get_int(j, "linear_conv_kernel_dim", 4);
  // partial_rotary_factor: in rope_parameters (transformers 5) or top-level (4.x configs).
  double partial = get_num(j, "partial_rotary_factor", 0.25);
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object())
    partial = get_num(*it, "partial_rotary_factor", partial);
  c.partial_rotary_factor = partial;
  c.full_attention_interval = get_int(j, "full_attention_interval", 4);
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) fail("config.json: 'layer_types' must be a list, got ", it->dump());
    for (const auto& t : *it) {
      if (!t.is_string()) fail("config.json: 'layer_types' entries must be strings, got ", t.dump());
      c.layer_types.push_back(t.get<std::string>());
    }
  } else {
    if (c.full_attention_interval <= 0)
      fail("config.json: full_attention_interval must be positive, got ", c.full_attention_interval);
    if (c.num_layers > kMaxLayers)
      fail("config.json: num_hidden_layers ", c.num_layers, " is implausible (at most ", kMaxLayers, ")");
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % c.full_attention_interval == 0 ? "full_attention" : "linear_attention");
  }
  if (get_bool(j, "attention_bias", false)) fail("config.json: attention_bias=true is not supported for ", c.architecture);
}

}  // namespace

ModelConfig ModelConfig::from_hf(const json& root) {
  if (!root.is_object()) fail("config.json: expected a JSON object");
  ModelConfig c;
  c.architecture = hf_architecture(root);
  // Composite (vision-language) checkpoints nest the decoder's config in text_config and its
  // tensors under model.language_model.; the vision tower is not ours to run.
  const json* text = &root;
  if (auto it = root.find("text_config"); it != root.end() && !it->is_null()) {
    if (!it->is_object()) fail("config.json: 'text_config' must be an object, got ", it->dump());
    text = &*it;
    c.text_prefix = "model.language_model.";
  }
  const json& j = *text;
  if (c.architecture == "qwen3_5_text") c.architecture = "qwen3_5";
  if (c.architecture == "qwen3_5_moe_text") c.architecture = "qwen3_5_moe";
  if (c.architecture != "llama" && c.architecture != "qwen2" && c.architecture != "qwen3" &&
      c.architecture != "qwen3_moe" && c.architecture != "qwen2_moe" && !is_hybrid_architecture(c.architecture))
    fail("config.json: architecture '", c.architecture,
         "' is not supported (supported: llama, qwen2, qwen3, qwen3_moe, qwen2_moe, qwen3_5, qwen3_5_moe, "
         "qwen3_next)");
  c.vocab_size = get_int(j, "vocab_size", 0);
  c.hidden_size = get_int(j, "hidden_size", 0);
  c.intermediate_size = get_int(j, "intermediate_size", 0);
  c.num_layers = get_int(j, "num_hidden_layers", 0);
  c.num_heads = get_int(j, "num_attention_heads", 0);
  c.num_kv_heads = get_int(j, "num_key_value_heads", c.num_heads);
  c.head_dim = get_int(j, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", 2048);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", 1e-6);
  // A composite checkpoint ties (or not) at its top level, as HF's PreTrainedModel reads it.
  c.tie_word_embeddings = get_bool(root, "tie_word_embeddings", get_bool(j, "tie_word_embeddings", false));
  if (text != &root && j.contains("tie_word_embeddings") && root.contains("tie_word_embeddings") &&
      get_bool(j, "tie_word_embeddings", false) != c.tie_word_embeddings)
    fail("config.json: tie_word_embeddings differs between the top level and text_config");
  c.attention_bias = c.architecture == "qwen2"       ? true
                     : c.architecture == "qwen2_moe" ? get_bool(j, "qkv_bias", true)
                                                     : get_bool(j, "attention_bias", false);
  c.qk_norm = c.architecture == "qwen3" || c.architecture == "qwen3_moe";
  // Qwen2-MoE: Qwen2 attention, and the sparse block with a sigmoid-gated shared expert that
  // Qwen3-Next and Qwen3.5-MoE also use.
  if (c.architecture == "qwen3_moe" || c.architecture == "qwen2_moe") c.read_moe_fields(j, /*norm_topk_default=*/false);
  if (c.architecture == "qwen2_moe" && get_bool(j, "use_sliding_window", false))
    fail("config.json: qwen2_moe with use_sliding_window=true is not supported");
  if (is_hybrid_architecture(c.architecture)) read_hybrid(j, c);
  else if (c.architecture != "llama") read_sliding_window(j, c);
  c.torch_dtype = get_str(j, "torch_dtype", get_str(j, "dtype", get_str(root, "torch_dtype", get_str(root, "dtype", ""))));
  if (j.contains("hidden_act") && get_str(j, "hidden_act", "silu") != "silu")
    fail("config.json: hidden_act '", get_str(j, "hidden_act", ""), "' is not supported (silu)");
  if (get_bool(j, "mlp_bias", false)) fail("config.json: mlp_bias=true is not supported");
  read_rope(j, c);
  if (j.contains("eos_token_id")) c.eos_token_ids = token_id_list(j["eos_token_id"]);
  c.bos_token_id = static_cast<int32_t>(get_int(j, "bos_token_id", -1));
  c.validate();
  return c;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& g) {
  ModelConfig c;
  c.architecture = g.get_string("general.architecture").value_or("");
  const std::string a = c.architecture;  // GGUF's name (metadata key prefix)
  if (a != "llama" && a != "qwen2" && a != "qwen3" && a != "qwen3moe" && a != "qwen35" && a != "qwen35moe" &&
      a != "qwen3next")
    fail(g.path(), ": GGUF architecture '", a,
         "' is not supported (supported: llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe, qwen3next)");
  const bool hybrid = a == "qwen35" || a == "qwen35moe" || a == "qwen3next";  // Gated DeltaNet + gated attention
  // llama.cpp writes no output matrix for a tied lm_head.
  c.tie_word_embeddings = std::none_of(g.tensors().begin(), g.tensors().end(),
                                       [](const TensorView& t) { return t.name == "output.weight"; });
  auto need_int = [&](const std::string& key) {
    auto v = g.get_int(a + "." + key);
    if (!v) fail(g.path(), ": GGUF metadata lacks '", a, ".", key, "'");
    return *v;
  };
  c.hidden_size = need_int("embedding_length");
  if (hybrid) read_gguf_hybrid(g, a, c);
  if (a == "qwen3moe") {
    // Every layer sparse; llama.cpp always renormalises the top-k weights for qwen3moe.
    c.architecture = "qwen3_moe";
    c.num_experts = need_int("expert_count");
    c.num_experts_per_tok = need_int("expert_used_count");
    c.moe_intermediate_size = need_int("expert_feed_forward_length");
    c.norm_topk_prob = true;
  }
  c.intermediate_size = a == "qwen3moe" || a == "qwen35moe" || a == "qwen3next"
                            ? g.get_int(a + ".feed_forward_length").value_or(c.moe_intermediate_size)
                            : need_int("feed_forward_length");
  const int64_t blocks = need_int("block_count");
  if (blocks < 0 || blocks - c.nextn_layers > kMaxLayers)  // nextn_layers is in [0, kMaxLayers]
    fail(g.path(), ": ", a, ".block_count ", blocks, " is implausible (at most ", kMaxLayers, " decoder layers)");
  c.num_layers = blocks - c.nextn_layers;
  c.num_heads = need_int("attention.head_count");
  c.num_kv_heads = g.get_int(a + ".attention.head_count_kv").value_or(c.num_heads);
  c.head_dim = g.get_int(a + ".attention.key_length").value_or(c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.max_position_embeddings = g.get_int(a + ".context_length").value_or(2048);
  c.rms_norm_eps = g.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5);
  c.rope_theta = g.get_float(a + ".rope.freq_base").value_or(10000.0);
  c.attention_bias = a == "qwen2";
  c.qk_norm = a == "qwen3" || a == "qwen3moe" || hybrid;
  if (hybrid) {
    const int64_t rot = need_int("rope.dimension_count");
    if (c.head_dim <= 0 || rot <= 0 || rot > c.head_dim || rot % 2 != 0)
      fail(g.path(), ": ", a, ".rope.dimension_count ", rot, " does not fit head_dim ", c.head_dim);
    c.partial_rotary_factor = static_cast<double>(rot) / static_cast<double>(c.head_dim);
    if (c.full_attention_interval <= 0) fail(g.path(), ": ", a, ".full_attention_interval must be positive");
    for (int64_t i = 0; i < c.num_layers; ++i)  // llama.cpp's rule: recurrent unless (i + 1) % interval == 0
      c.layer_types.push_back((i + 1) % c.full_attention_interval == 0 ? "full_attention" : "linear_attention");
  } else if (const std::optional<int64_t> rot = g.get_int(a + ".rope.dimension_count"); rot && *rot != c.head_dim) {
    // Dense models here rotate the whole head; a file that says otherwise is refused, not misread.
    fail(g.path(), ": ", a, ".rope.dimension_count ", *rot, " differs from head_dim ", c.head_dim,
         " (partial rotary is supported for the hybrid architectures only)");
  }
  // llama.cpp's converter permutes llama Q/K rows so that rope rotates adjacent pairs.
  c.rope_interleaved = a == "llama";
  const std::string scaling = g.get_string(a + ".rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    c.rope_scaling = RopeScaling::Linear;
    c.rope_factor = g.get_float(a + ".rope.scaling.factor").value_or(1.0);
  } else if (scaling == "yarn") {
    c.rope_scaling = RopeScaling::Yarn;
    c.rope_factor = g.get_float(a + ".rope.scaling.factor").value_or(1.0);
    c.rope_original_max_position =
        g.get_int(a + ".rope.scaling.original_context_length").value_or(c.max_position_embeddings);
    c.yarn_beta_fast = g.get_float(a + ".rope.scaling.yarn_beta_fast").value_or(32.0);
    c.yarn_beta_slow = g.get_float(a + ".rope.scaling.yarn_beta_slow").value_or(1.0);
  } else if (scaling != "none") {
    fail(g.path(), ": GGUF rope scaling '", scaling, "' is not supported");
  }
  // Vocabulary size from the token list (the embedding shape is checked at load).
  if (const GgufValue* toks = g.find("tokenizer.ggml.tokens")) c.vocab_size = static_cast<int64_t>(toks->strings.size());
  if (auto eos = g.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(static_cast<int32_t>(*eos));
  if (auto bos = g.get_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = static_cast<int32_t>(*bos);
  c.validate();
  return c;
}

void ModelConfig::read_moe_fields(const json& j, bool norm_topk_default) {
  num_experts = get_int(j, "num_experts", get_int(j, "num_local_experts", 0));
  num_experts_per_tok = get_int(j, "num_experts_per_tok", 0);
  moe_intermediate_size = get_int(j, "moe_intermediate_size", 0);
  norm_topk_prob = get_bool(j, "norm_topk_prob", norm_topk_default);
  decoder_sparse_step = get_int(j, "decoder_sparse_step", 1);
  shared_expert_intermediate_size = get_int(j, "shared_expert_intermediate_size", 0);
  mlp_only_layers.clear();
  if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) fail("config.json: 'mlp_only_layers' must be a list of layer indices");
    for (const auto& v : *it) {
      if (!v.is_number_integer()) fail("config.json: 'mlp_only_layers' must hold integers, got ", v.dump());
      mlp_only_layers.push_back(v.get<int64_t>());
    }
  }
}

bool ModelConfig::is_sparse_layer(int64_t layer) const {
  // transformers' Qwen3MoeDecoderLayer / Qwen3NextDecoderLayer rule.
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

void ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* what) {
    if (v <= 0) fail("model config: ", what, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_hidden_layers");
  positive(num_heads, "num_attention_heads");
  positive(num_kv_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(max_position_embeddings, "max_position_embeddings");
  // Sane maxima, checked before anything is sized by them (a head_dim of 2^31 allocated
  // gigabytes before the tensors' shapes refused the checkpoint). The largest real values
  // are far below: head_dim 256, 128 heads, intermediate 73,728 (Llama 3 405B: 53,248), 10M
  // positions (Llama 4 Scout).
  auto at_most = [](int64_t v, int64_t most, const char* what) {
    if (v > most) fail("model config: ", what, " must be at most ", most, ", got ", v);
  };
  at_most(head_dim, 1024, "head_dim");
  at_most(num_heads, 1024, "num_attention_heads");
  at_most(num_kv_heads, 1024, "num_key_value_heads");
  at_most(intermediate_size, int64_t{1} << 20, "intermediate_size");
  at_most(moe_intermediate_size, int64_t{1} << 20, "moe_intermediate_size");
  at_most(shared_expert_intermediate_size, int64_t{1} << 20, "shared_expert_intermediate_size");
  at_most(max_position_embeddings, int64_t{1} << 26, "max_position_embeddings");
  at_most(rope_original_max_position, int64_t{1} << 26, "original_max_position_embeddings");
  if (num_heads % num_kv_heads != 0)
    fail("model config: num_attention_heads (", num_heads, ") is not a multiple of num_key_value_heads (",
         num_kv_heads, ")");
  if (head_dim % 2 != 0) fail("model config: head_dim must be even for rotary, got ", head_dim);
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps)) fail("model config: rms_norm_eps must be positive");
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) fail("model config: rope_theta must be positive");
  if (num_layers > kMaxLayers || hidden_size > (1 << 20) || vocab_size > (1 << 24))
    fail("model config: implausible sizes (layers ", num_layers, ", hidden ", hidden_size, ", vocab ",
         vocab_size, ")");
  if (num_experts < 0 || num_experts > 4096) fail("model config: implausible num_experts ", num_experts);
  // Each size may be plausible and their product not: parameter counts (zen inspect's, in
  // int64) would overflow. 2^52 parameters is 4,000 times a trillion-parameter model.
  const double mlp = std::max(static_cast<double>(intermediate_size),
                              static_cast<double>(num_experts) * static_cast<double>(moe_intermediate_size) +
                                  static_cast<double>(shared_expert_intermediate_size));
  const double per_layer = 3.0 * static_cast<double>(hidden_size) * mlp +
                           4.0 * static_cast<double>(hidden_size) * static_cast<double>(num_heads * head_dim);
  const double total = per_layer * static_cast<double>(num_layers) + 2.0 * static_cast<double>(vocab_size) * static_cast<double>(hidden_size);
  if (total > 0x1p52) fail("model config: about ", total, " parameters is implausible (at most 2^52)");
  if (num_experts > 0) {
    if (num_experts_per_tok < 1 || num_experts_per_tok > num_experts)
      fail("model config: num_experts_per_tok must be in [1, num_experts = ", num_experts, "], got ",
           num_experts_per_tok);
    positive(moe_intermediate_size, "moe_intermediate_size");
    positive(decoder_sparse_step, "decoder_sparse_step");
    if (shared_expert_intermediate_size < 0) fail("model config: shared_expert_intermediate_size is negative");
  }
  if (rope_scaling == RopeScaling::Yarn && rope_original_max_position <= 0)
    fail("model config: yarn needs original_max_position_embeddings");
  if (!(partial_rotary_factor > 0 && partial_rotary_factor <= 1))
    fail("model config: partial_rotary_factor must be in (0, 1], got ", partial_rotary_factor);
  if (rotary_dim() < 2 || rotary_dim() % 2 != 0)
    fail("model config: rotary dimension head_dim * partial_rotary_factor = ", rotary_dim(), " must be even and >= 2");
  if (!attention_windows.empty() && static_cast<int64_t>(attention_windows.size()) != num_layers)
    fail("model config: ", attention_windows.size(), " attention windows for ", num_layers, " layers");
  for (int64_t w : attention_windows)
    if (w < 0) fail("model config: attention window ", w, " is negative");
  if (!layer_types.empty()) {
    if (static_cast<int64_t>(layer_types.size()) != num_layers)
      fail("model config: layer_types has ", layer_types.size(), " entries for ", num_layers, " layers");
    for (const std::string& t : layer_types)
      if (t != "full_attention" && t != "linear_attention")
        fail("model config: layer type '", t, "' is not supported (full_attention, linear_attention)");
  }
  if (num_linear_layers() > 0) {
    auto positive_linear = [&](int64_t v, const char* what) {
      if (v <= 0 || v > 4096) fail("model config: ", what, " must be in [1, 4096], got ", v);
    };
    positive_linear(linear_num_key_heads, "linear_num_key_heads");
    positive_linear(linear_num_value_heads, "linear_num_value_heads");
    positive_linear(linear_key_head_dim, "linear_key_head_dim");
    positive_linear(linear_value_head_dim, "linear_value_head_dim");
    if (linear_conv_kernel_dim < 1 || linear_conv_kernel_dim > 16)
      fail("model config: linear_conv_kernel_dim must be in [1, 16], got ", linear_conv_kernel_dim);
    if (linear_num_value_heads % linear_num_key_heads != 0)
      fail("model config: linear_num_value_heads (", linear_num_value_heads,
           ") is not a multiple of linear_num_key_heads (", linear_num_key_heads, ")");
  }
}

int64_t ModelConfig::rotary_dim() const {
  // As HF: int(head_dim * partial_rotary_factor).
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

bool ModelConfig::is_full_attention(int64_t layer) const {
  if (layer_types.empty()) return true;
  return layer_types.at(static_cast<size_t>(layer)) == "full_attention";
}

int64_t ModelConfig::num_kv_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += is_full_attention(l) ? 1 : 0;
  return n;
}

int ModelConfig::kv_layer_index(int64_t layer) const {
  if (!is_full_attention(layer)) return -1;
  int index = 0;
  for (int64_t l = 0; l < layer; ++l) index += is_full_attention(l) ? 1 : 0;
  return index;
}

int64_t ModelConfig::num_window_kv_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += is_window_layer(l) ? 1 : 0;
  return n;
}

int64_t ModelConfig::max_attention_window() const {
  int64_t w = kv_budget_window;
  for (int64_t l = 0; l < num_layers; ++l) w = std::max(w, is_full_attention(l) ? attention_window(l) : 0);
  return w;
}

int ModelConfig::kv_group_index(int64_t layer) const {
  if (!is_full_attention(layer)) return -1;
  const bool windowed = is_window_layer(layer);
  int index = 0;
  for (int64_t l = 0; l < layer; ++l) index += is_full_attention(l) && is_window_layer(l) == windowed ? 1 : 0;
  return index;
}

ModelConfig ModelConfig::kv_group_config(bool windowed) const {
  ModelConfig c = *this;
  c.num_layers = windowed ? num_window_kv_layers() : num_kv_layers() - num_window_kv_layers();
  c.layer_types.clear();
  c.attention_windows.clear();
  c.kv_budget_layers = windowed ? kv_budget_window_layers : kv_budget_other_layers;
  c.kv_budget_window_layers = c.kv_budget_other_layers = c.kv_budget_window = 0;
  return c;
}

}  // namespace zen
