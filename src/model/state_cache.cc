#include "model/state_cache.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace zen {

StatePool::StatePool(int64_t floats_per_slot, int64_t num_slots)
    : floats_per_slot_(floats_per_slot), num_slots_(num_slots) {
  if (floats_per_slot <= 0 || num_slots <= 0)
    fail("recurrent-state pool needs positive sizes, got ", num_slots, " slots of ", floats_per_slot, " floats");
  constexpr auto kLineFloats = static_cast<int64_t>(kCacheLine / sizeof(float));
  stride_ = (floats_per_slot + kLineFloats - 1) / kLineFloats * kLineFloats;
  data_ = make_aligned_floats(static_cast<size_t>(stride_ * num_slots));
}

float* StatePool::slot(int32_t i) {
  ZEN_CHECK(i >= 0 && i < num_slots_, "state slot ", i, " of ", num_slots_);
  return &data_[static_cast<size_t>(i) * static_cast<size_t>(stride_)];
}

const float* StatePool::slot(int32_t i) const {
  ZEN_CHECK(i >= 0 && i < num_slots_, "state slot ", i, " of ", num_slots_);
  return &data_[static_cast<size_t>(i) * static_cast<size_t>(stride_)];
}

void StatePool::zero(int32_t i) {
  float* to = slot(i);
  if (observer) observer(-1, i);
  std::fill_n(to, floats_per_slot_, 0.0f);
}

void StatePool::copy(int32_t src, int32_t dst) {
  if (src == dst) return;
  float* to = slot(dst);
  const float* from = slot(src);
  if (observer) observer(src, dst);
  std::memcpy(to, from, bytes_per_slot());
}

int64_t recurrent_state_floats(const ModelConfig& cfg) {
  const int64_t linear_layers = cfg.num_linear_layers();
  if (linear_layers == 0) return 0;
  const int64_t hk = cfg.linear_num_key_heads, hv = cfg.linear_num_value_heads;
  const int64_t dk = cfg.linear_key_head_dim, dv = cfg.linear_value_head_dim;
  const int64_t conv_dim = 2 * hk * dk + hv * dv;  // q, k, v channels share the conv
  const int64_t per_layer = conv_dim * (cfg.linear_conv_kernel_dim - 1) + hv * dk * dv;
  return linear_layers * per_layer;
}

}  // namespace zen
