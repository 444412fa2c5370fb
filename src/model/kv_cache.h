// Per-sequence attention state: K and V of every layer, [layer][pos][kv_heads * head_dim],
// stored in f32, bf16, or fp8 (e4m3 / e5m2, unscaled with saturation, as vLLM's fp8 cache
// with scale 1). Attention reads through dot_k/axpy_v, which convert on the fly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace zen {

enum class KvDType { F32, BF16, F8_E4M3, F8_E5M2 };

// --kv-cache-quant {auto,f32,bf16,fp8,fp8_e4m3,fp8_e5m2}; auto is f32 on the CPU (exact).
KvDType parse_kv_cache_quant(const std::string& value);  // throws naming the accepted values
const char* kv_dtype_name(KvDType t);
size_t kv_dtype_bytes(KvDType t);

class KvCache {
 public:
  KvCache(const ModelConfig& cfg, int64_t capacity, KvDType dtype = KvDType::F32);
  int64_t size() const { return n_past_; }  // tokens already in the cache
  int64_t capacity() const { return capacity_; }
  KvDType dtype() const { return dtype_; }
  size_t bytes_per_token() const;  // all layers, K and V
  void clear() { n_past_ = 0; }
  void truncate(int64_t n);  // drop tokens from position n on
  void advance(int64_t n) { n_past_ += n; }

  // Writes one token's K and V rows ([kv_heads * head_dim] each) at pos.
  void store(int layer, int64_t pos, const float* k, const float* v);
  // q . K[layer][pos][kv_head]  (q: [head_dim])
  float dot_k(int layer, int64_t pos, int64_t kv_head, const float* q) const;
  // out += a * V[layer][pos][kv_head]  (out: [head_dim])
  void axpy_v(int layer, int64_t pos, int64_t kv_head, float a, float* out) const;
  // Batched forms for attention (one dtype switch per call, not per key); each element is
  // exactly what dot_k / axpy_v give.
  // scores[j] = q . K[layer][j][kv_head] * scale, j in [0, n)
  void key_scores(int layer, int64_t kv_head, const float* q, float scale, int64_t n, float* scores) const;
  // out = sum_j weights[j] * V[layer][j][kv_head], j in [0, n), accumulated in order of j
  void weighted_values(int layer, int64_t kv_head, const float* weights, int64_t n, float* out) const;

 private:
  size_t offset(int layer, int64_t pos, int64_t kv_head) const;
  KvDType dtype_;
  int64_t capacity_;
  int64_t n_past_ = 0;
  int64_t head_dim_;
  int64_t row_;  // kv_heads * head_dim elements
  int64_t layer_stride_;
  std::vector<uint8_t> k_, v_;
};

}  // namespace zen
