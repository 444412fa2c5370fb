#include "model/weight_names.h"

#include <map>

#include "base/error.h"

namespace zen {

std::string WeightNames::layer(int i, const std::string& role) const {
  // role -> {HF suffix after "model.layers.N.", GGUF suffix after "blk.N."}
  static const std::map<std::string, std::pair<const char*, const char*>> kNames = {
      {"attn_norm", {"input_layernorm.weight", "attn_norm.weight"}},
      {"q", {"self_attn.q_proj.weight", "attn_q.weight"}},
      {"k", {"self_attn.k_proj.weight", "attn_k.weight"}},
      {"v", {"self_attn.v_proj.weight", "attn_v.weight"}},
      {"o", {"self_attn.o_proj.weight", "attn_output.weight"}},
      {"q_bias", {"self_attn.q_proj.bias", "attn_q.bias"}},
      {"k_bias", {"self_attn.k_proj.bias", "attn_k.bias"}},
      {"v_bias", {"self_attn.v_proj.bias", "attn_v.bias"}},
      {"q_norm", {"self_attn.q_norm.weight", "attn_q_norm.weight"}},
      {"k_norm", {"self_attn.k_norm.weight", "attn_k_norm.weight"}},
      {"ffn_norm", {"post_attention_layernorm.weight", "ffn_norm.weight"}},
      {"gate", {"mlp.gate_proj.weight", "ffn_gate.weight"}},
      {"up", {"mlp.up_proj.weight", "ffn_up.weight"}},
      {"down", {"mlp.down_proj.weight", "ffn_down.weight"}},
  };
  auto it = kNames.find(role);
  ZEN_CHECK(it != kNames.end(), "unknown weight role ", role);
  const std::string idx = std::to_string(i);
  return gguf_ ? "blk." + idx + "." + it->second.second : "model.layers." + idx + "." + it->second.first;
}

}  // namespace zen
