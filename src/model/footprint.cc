#include "model/footprint.h"

#include "model/gated_delta_net.h"
#include "model/kv_cache.h"
#include "model/state_cache.h"

namespace zen {
namespace {

bool is_hybrid(const ModelConfig& c) {
  return c.architecture == "qwen3_5" || c.architecture == "qwen3_5_moe" || c.architecture == "qwen3_next";
}

int64_t attention_parameters(const ModelConfig& c) {
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int64_t q_rows = c.num_heads * hd * (c.attn_output_gate ? 2 : 1), kv_rows = c.num_kv_heads * hd;
  int64_t n = q_rows * H + 2 * kv_rows * H + H * c.num_heads * hd;
  if (c.attention_bias) n += q_rows + 2 * kv_rows;
  if (c.qk_norm) n += 2 * hd;
  return n;
}

int64_t gdn_parameters(const ModelConfig& c) {
  const GdnShape s = GdnShape::from_config(c);
  const int64_t H = s.hidden;
  return H * (s.conv_dim() + s.value_dim() + 2 * s.num_v_heads)  // qkv, z, b, a (fused or not)
         + s.conv_dim() * s.conv_kernel                          // conv1d
         + 2 * s.num_v_heads + s.v_head_dim                      // A_log, dt_bias, norm
         + s.value_dim() * H;                                    // out_proj
}

}  // namespace

ParameterCount count_parameters(const ModelConfig& c) {
  const int64_t H = c.hidden_size, V = c.vocab_size;
  ParameterCount p;
  auto add = [&](int64_t total, int64_t active) {
    p.total += total;
    p.active += active;
  };
  add(V * H, V * H);                                            // embedding
  if (!c.tie_word_embeddings) add(V * H, V * H);                // lm_head
  add(H, H);                                                    // final norm
  for (int64_t l = 0; l < c.num_layers; ++l) {
    add(2 * H, 2 * H);                                          // input / post-attention norms
    const bool linear = is_hybrid(c) && !c.is_full_attention(l);
    const int64_t mixer = linear ? gdn_parameters(c) : attention_parameters(c);
    add(mixer, mixer);
    if (c.is_sparse_layer(l)) {
      const int64_t expert = 3 * H * c.moe_intermediate_size;
      const int64_t shared = c.shared_expert_intermediate_size > 0 ? 3 * H * c.shared_expert_intermediate_size + H : 0;
      const int64_t router = c.num_experts * H;
      add(router + c.num_experts * expert + shared, router + c.num_experts_per_tok * expert + shared);
    } else {
      add(3 * H * c.intermediate_size, 3 * H * c.intermediate_size);
    }
  }
  return p;
}

int64_t kv_bytes_per_token_f32(const ModelConfig& cfg) {
  return static_cast<int64_t>(KvPool::bytes_per_token(cfg, KvDType::F32));
}

int64_t recurrent_state_bytes(const ModelConfig& cfg) {
  return recurrent_state_floats(cfg) * static_cast<int64_t>(sizeof(float));
}

}  // namespace zen
