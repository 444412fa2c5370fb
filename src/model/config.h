// One configuration struct for the family, read from an HF config.json or GGUF metadata.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zen {

class GgufFile;

enum class RopeScaling { None, Linear, Yarn };

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2", "qwen3", "qwen3_5", "qwen3_next"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v bias (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  // Rotary embedding.
  double rope_theta = 10000.0;
  bool rope_interleaved = false;  // GGUF llama: rotate adjacent pairs (ggml "normal" mode)
  RopeScaling rope_scaling = RopeScaling::None;
  double rope_factor = 1.0;
  int64_t rope_original_max_position = 0;
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  double yarn_attention_factor = 0.0;  // 0: derived (0.1 ln(factor) + 1)
  std::string torch_dtype;             // informational
  // Hybrid models (qwen3_5, qwen3_next): per layer "full_attention" or "linear_attention";
  // empty means every layer is full attention.
  std::vector<std::string> layer_types;
  // Gated DeltaNet (linear_attention layers).
  int64_t linear_num_key_heads = 0;     // Hk
  int64_t linear_num_value_heads = 0;   // Hv (a multiple of Hk)
  int64_t linear_key_head_dim = 0;      // Dk
  int64_t linear_value_head_dim = 0;    // Dv
  int64_t linear_conv_kernel_dim = 0;   // causal depthwise conv1d width (4)
  // --- Hybrid models (qwen3_5, qwen3_next) beyond the layer schedule -------------------------
  // Rotary covers the first head_dim * partial_rotary_factor entries of each head (0.25 for
  // the hybrids; HF's default when the config omits it), the rest pass through.
  double partial_rotary_factor = 1.0;
  // Gated full attention: q_proj yields [query | gate] per head ([nh, 2 * hd]) and the
  // attention output is multiplied by sigmoid(gate) before o_proj.
  bool attn_output_gate = false;
  // RMSNorm gains are stored zero-centred: out = norm(x) * (1 + w) (layer norms, q/k norms,
  // final norm; not the GDN output norm).
  bool zero_centered_norm = false;
  // Qwen3-Next stores the GDN input projections fused and grouped per key head
  // (in_proj_qkvz, in_proj_ba); Qwen3.5 stores in_proj_qkv / in_proj_z / in_proj_b / in_proj_a.
  bool linear_fused_projections = false;
  // GGUF (llama.cpp's converter): llama.cpp's tensor names, zero-centred gains stored with
  // the 1 folded in (so applied as they are), A_log stored as -exp(A_log).
  bool gguf_hybrid_layout = false;
  // qwen35 / qwen35moe GGUF: value heads stored tiled ([r][Hk] order: value head h uses key head
  // h % Hk) rather than grouped by key head (h / r, HF and qwen3next GGUF).
  bool linear_v_heads_tiled = false;
  int64_t nextn_layers = 0;  // GGUF: MTP ("nextn") blocks appended after num_layers (not run)
  // Where the decoder's tensors live: "model." (text-only checkpoints) or
  // "model.language_model." (Qwen3.5 composite checkpoints with a vision tower).
  std::string text_prefix = "model.";
  // Every full_attention_interval-th layer is full attention when layer_types is absent.
  int64_t full_attention_interval = 0;
  // ---- Sparse mixture of experts (qwen3_moe; the fields qwen3_next / qwen3_5_moe share) ----
  // A layer's MLP is sparse (model/moe.h) when is_sparse_layer(layer); otherwise dense.
  int64_t num_experts = 0;                      // E; 0: no MoE layers
  int64_t num_experts_per_tok = 0;              // k, experts chosen per token
  int64_t moe_intermediate_size = 0;            // I of each routed expert
  bool norm_topk_prob = false;                  // renormalise the k chosen probabilities to sum 1
  int64_t decoder_sparse_step = 1;              // sparse iff (layer + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;         // ... and layer not listed here
  int64_t shared_expert_intermediate_size = 0;  // Is; 0: no shared expert
  bool is_sparse_layer(int64_t layer) const;
  // ---- end of the MoE block ----
  std::vector<int32_t> eos_token_ids;  // from generation_config.json / config.json / GGUF
  int32_t bos_token_id = -1;

  // Sliding-window attention (transformers' Qwen2 / Qwen3 `use_sliding_window`): per layer the
  // number of positions a query attends to, itself included (keys at q - W < k <= q); 0 =
  // full causal attention. Empty: every layer full.
  std::vector<int64_t> attention_windows;
  int64_t attention_window(int64_t layer) const {
    return attention_windows.empty() ? 0 : attention_windows.at(static_cast<size_t>(layer));
  }

  // A pipeline stage's config: the most KV layers any stage of the job holds. The engine on
  // rank 0 budgets KV blocks with it (every stage allocates the same blocks), so a stage with
  // few or no attention layers does not size the job's cache. 0: num_kv_layers().
  int64_t kv_budget_layers = 0;
  // The same for the two KV groups the engine may keep apart (kv_group_config): the most
  // sliding-window layers and the most other KV layers any stage holds, and the widest window
  // of any stage (every stage's window pool mirrors rank 0's). 0: this config's own.
  int64_t kv_budget_window_layers = 0, kv_budget_other_layers = 0, kv_budget_window = 0;

  bool is_full_attention(int64_t layer) const;
  int64_t num_kv_layers() const;            // layers that keep K and V
  int kv_layer_index(int64_t layer) const;  // index among KV layers; -1 for linear layers
  // A KV layer with a sliding window: the engine may keep its K/V apart, bounded by the window
  // (ForwardBatch::window_kv). The two groups, windowed and not, each index their own layers.
  bool is_window_layer(int64_t layer) const { return is_full_attention(layer) && attention_window(layer) > 0; }
  int64_t num_window_kv_layers() const;
  int64_t max_attention_window() const;  // of the whole job (kv_budget_window included)
  int kv_group_index(int64_t layer) const;  // index among the KV layers of its group; -1 for linear
  // A config whose KV layers are one group's (for sizing and building that group's pool).
  ModelConfig kv_group_config(bool windowed) const;
  int64_t num_linear_layers() const { return num_layers - num_kv_layers(); }
  bool is_hybrid() const { return num_linear_layers() > 0; }
  // Rotated entries per head: head_dim * partial_rotary_factor (even).
  int64_t rotary_dim() const;

  // Reads the MoE block above from an HF config object (absent keys keep the defaults;
  // norm_topk_prob defaults to `norm_topk_default`: false for qwen3_moe, true for qwen3_next).
  void read_moe_fields(const nlohmann::json& config, bool norm_topk_default);
  static ModelConfig from_hf(const nlohmann::json& config);  // throws zen::Error
  static ModelConfig from_gguf(const GgufFile& gguf);
  void validate() const;  // throws zen::Error on inconsistent values
};

}  // namespace zen
