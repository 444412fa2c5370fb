#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/ops.h"

namespace zen {
namespace {

void encode_row(KvDType dtype, const float* x, uint8_t* out, int64_t n) {
  switch (dtype) {
    case KvDType::F32:
      std::memcpy(out, x, static_cast<size_t>(n) * 4);
      return;
    case KvDType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case KvDType::F8_E4M3:
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_fp8_e4m3(x[i]);
      return;
    case KvDType::F8_E5M2:
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_fp8_e5m2(x[i]);
      return;
  }
}

// Decode tables: kernels::e4m3_lut / e5m2_lut, shared with the FP8 weight kernels.
float dot_fp8(const float* table, const float* q, const uint8_t* k, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += q[i] * table[k[i]];
  return s;
}

}  // namespace

KvDType parse_kv_cache_quant(const std::string& v) {
  if (v == "auto" || v == "f32") return KvDType::F32;
  if (v == "bf16") return KvDType::BF16;
  if (v == "fp8" || v == "fp8_e4m3") return KvDType::F8_E4M3;
  if (v == "fp8_e5m2") return KvDType::F8_E5M2;
  fail("--kv-cache-quant must be one of {auto,f32,bf16,fp8,fp8_e4m3,fp8_e5m2}, got '", v, "'");
}

const char* kv_dtype_name(KvDType t) {
  switch (t) {
    case KvDType::F32: return "f32";
    case KvDType::BF16: return "bf16";
    case KvDType::F8_E4M3: return "fp8_e4m3";
    case KvDType::F8_E5M2: return "fp8_e5m2";
  }
  return "?";
}

size_t kv_dtype_bytes(KvDType t) {
  switch (t) {
    case KvDType::F32: return 4;
    case KvDType::BF16: return 2;
    default: return 1;
  }
}

KvCache::KvCache(const ModelConfig& cfg, int64_t capacity, KvDType dtype)
    : dtype_(dtype),
      capacity_(capacity),
      head_dim_(cfg.head_dim),
      row_(cfg.num_kv_heads * cfg.head_dim),
      layer_stride_(capacity * row_) {
  if (capacity <= 0) fail("KV cache capacity must be positive, got ", capacity);
  const size_t total = static_cast<size_t>(cfg.num_layers) * static_cast<size_t>(layer_stride_) * kv_dtype_bytes(dtype);
  k_.resize(total);
  v_.resize(total);
}

size_t KvCache::bytes_per_token() const {
  return 2 * static_cast<size_t>(k_.size() / static_cast<size_t>(capacity_));
}

void KvCache::truncate(int64_t n) {
  ZEN_CHECK(n >= 0 && n <= n_past_, "truncate to ", n, " of ", n_past_);
  n_past_ = n;
}

size_t KvCache::offset(int layer, int64_t pos, int64_t kv_head) const {
  return static_cast<size_t>(layer * layer_stride_ + pos * row_ + kv_head * head_dim_) * kv_dtype_bytes(dtype_);
}

void KvCache::store(int layer, int64_t pos, const float* k, const float* v) {
  ZEN_CHECK(pos >= 0 && pos < capacity_, "KV position ", pos, " outside capacity ", capacity_);
  encode_row(dtype_, k, &k_[offset(layer, pos, 0)], row_);
  encode_row(dtype_, v, &v_[offset(layer, pos, 0)], row_);
}

float KvCache::dot_k(int layer, int64_t pos, int64_t kv_head, const float* q) const {
  const uint8_t* k = &k_[offset(layer, pos, kv_head)];
  switch (dtype_) {
    case KvDType::F32:
      return kernels::dot_f32(q, reinterpret_cast<const float*>(k), head_dim_);
    case KvDType::BF16: {
      float s = 0.0f;
      for (int64_t i = 0; i < head_dim_; ++i) {
        uint16_t h;
        std::memcpy(&h, k + 2 * i, 2);
        s += q[i] * bf16_to_f32(h);
      }
      return s;
    }
    case KvDType::F8_E4M3: return dot_fp8(kernels::e4m3_lut(), q, k, head_dim_);
    case KvDType::F8_E5M2: return dot_fp8(kernels::e5m2_lut(), q, k, head_dim_);
  }
  return 0.0f;
}

void KvCache::axpy_v(int layer, int64_t pos, int64_t kv_head, float a, float* out) const {
  const uint8_t* v = &v_[offset(layer, pos, kv_head)];
  switch (dtype_) {
    case KvDType::F32:
      kernels::axpy_f32(a, reinterpret_cast<const float*>(v), out, head_dim_);
      return;
    case KvDType::BF16:
      for (int64_t i = 0; i < head_dim_; ++i) {
        uint16_t h;
        std::memcpy(&h, v + 2 * i, 2);
        out[i] += a * bf16_to_f32(h);
      }
      return;
    case KvDType::F8_E4M3:
      for (int64_t i = 0; i < head_dim_; ++i) out[i] += a * kernels::e4m3_lut()[v[i]];
      return;
    case KvDType::F8_E5M2:
      for (int64_t i = 0; i < head_dim_; ++i) out[i] += a * kernels::e5m2_lut()[v[i]];
      return;
  }
}

void KvCache::key_scores(int layer, int64_t kv_head, const float* q, float scale, int64_t n, float* scores) const {
  if (dtype_ == KvDType::F32) {
    const size_t stride = static_cast<size_t>(row_);
    const float* k = reinterpret_cast<const float*>(&k_[offset(layer, 0, kv_head)]);
    for (int64_t j = 0; j < n; ++j) scores[j] = kernels::dot_f32(q, k + static_cast<size_t>(j) * stride, head_dim_) * scale;
    return;
  }
  for (int64_t j = 0; j < n; ++j) scores[j] = dot_k(layer, j, kv_head, q) * scale;
}

void KvCache::weighted_values(int layer, int64_t kv_head, const float* weights, int64_t n, float* out) const {
  std::fill(out, out + head_dim_, 0.0f);
  if (dtype_ == KvDType::F32) {
    const size_t stride = static_cast<size_t>(row_);
    const float* v = reinterpret_cast<const float*>(&v_[offset(layer, 0, kv_head)]);
    for (int64_t j = 0; j < n; ++j) kernels::axpy_f32(weights[j], v + static_cast<size_t>(j) * stride, out, head_dim_);
    return;
  }
  for (int64_t j = 0; j < n; ++j) axpy_v(layer, j, kv_head, weights[j], out);
}

}  // namespace zen
