#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace zen {
namespace {

// HF's _compute_yarn_parameters helpers.
double yarn_correction_dim(double rotations, int64_t dim, double base, double max_pos) {
  return (static_cast<double>(dim) * std::log(max_pos / (rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
}

double yarn_mscale(double scale) { return scale <= 1.0 ? 1.0 : 0.1 * std::log(scale) + 1.0; }

}  // namespace

Rope::Rope(const ModelConfig& cfg) : dim_(cfg.rotary_dim()), interleaved_(cfg.rope_interleaved) {
  const int64_t half = dim_ / 2;
  inv_freq_.resize(half);
  // As HF: pos_freqs = base ** (arange(0, dim, 2) / dim) evaluated in float32.
  std::vector<float> pos_freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim_);
    pos_freqs[i] = std::pow(static_cast<float>(cfg.rope_theta), exponent);
    inv_freq_[i] = 1.0f / pos_freqs[i];
  }
  if (cfg.rope_scaling == RopeScaling::Linear) {
    for (float& f : inv_freq_) f /= static_cast<float>(cfg.rope_factor);
  } else if (cfg.rope_scaling == RopeScaling::Yarn) {
    const double factor = cfg.rope_factor;
    const double base = cfg.rope_theta;
    const double orig = static_cast<double>(cfg.rope_original_max_position);
    double low = std::floor(yarn_correction_dim(cfg.yarn_beta_fast, dim_, base, orig));
    double high = std::ceil(yarn_correction_dim(cfg.yarn_beta_slow, dim_, base, orig));
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim_ - 1));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      const float extrapolation = inv_freq_[i];
      const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
      const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
      const float extrapolation_factor = 1.0f - ramp;
      inv_freq_[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
    attention_factor_ = static_cast<float>(cfg.yarn_attention_factor > 0 ? cfg.yarn_attention_factor
                                                                          : yarn_mscale(factor));
  }
}

void Rope::angles(int64_t pos, float* cos_out, float* sin_out) const {
  const float p = static_cast<float>(pos);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float theta = p * inv_freq_[i];  // f32 product, as HF
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(theta))) * attention_factor_;
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(theta))) * attention_factor_;
  }
}

void Rope::apply(float* x, int64_t n_heads, int64_t head_dim, const float* cos_v, const float* sin_v) const {
  const int64_t half = dim_ / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    if (interleaved_) {
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cos_v[i] - b * sin_v[i];
        v[2 * i + 1] = a * sin_v[i] + b * cos_v[i];
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos_v[i] - b * sin_v[i];
        v[i + half] = b * cos_v[i] + a * sin_v[i];
      }
    }
  }
}

}  // namespace zen
