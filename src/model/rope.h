// Rotary position embedding for the family: default, linear and YaRN scaling (HF's
// formulas), rotating half-split pairs (HF, GGUF qwen) or adjacent pairs (GGUF llama).
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace zen {

class Rope {
 public:
  explicit Rope(const ModelConfig& cfg);
  int64_t dim() const { return dim_; }  // rotated entries per head: ModelConfig::rotary_dim()
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [dim/2]
  float attention_factor() const { return attention_factor_; }

  // cos/sin for one position: [dim/2] each, already scaled by attention_factor.
  void angles(int64_t pos, float* cos_out, float* sin_out) const;
  // Rotates n_heads vectors of head_dim in place (x: [n_heads, head_dim]); only the first
  // dim() entries of each head rotate.
  void apply(float* x, int64_t n_heads, int64_t head_dim, const float* cos_v, const float* sin_v) const;

 private:
  int64_t dim_;
  bool interleaved_;
  float attention_factor_ = 1.0f;
  std::vector<float> inv_freq_;
};

}  // namespace zen
