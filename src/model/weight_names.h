// Tensor names of the dense family in HF safetensors and in GGUF (llama.cpp's names).
#pragma once
#include <string>

namespace zen {

class WeightNames {
 public:
  explicit WeightNames(bool gguf) : gguf_(gguf) {}
  std::string embed() const { return gguf_ ? "token_embd.weight" : "model.embed_tokens.weight"; }
  std::string final_norm() const { return gguf_ ? "output_norm.weight" : "model.norm.weight"; }
  std::string lm_head() const { return gguf_ ? "output.weight" : "lm_head.weight"; }
  // role: attn_norm q k v o q_bias k_bias v_bias q_norm k_norm ffn_norm gate up down
  std::string layer(int i, const std::string& role) const;
  // Every tensor of layer i starts with this ("blk.3." / "model.layers.3.").
  std::string layer_prefix(int i) const {
    return gguf_ ? "blk." + std::to_string(i) + "." : "model.layers." + std::to_string(i) + ".";
  }
  // Module prefix of a sparse MoE block (model/moe.h names the tensors under it).
  std::string moe_prefix(int i) const {
    return gguf_ ? "blk." + std::to_string(i) : "model.layers." + std::to_string(i) + ".mlp";
  }

 private:
  bool gguf_;
};

}  // namespace zen
