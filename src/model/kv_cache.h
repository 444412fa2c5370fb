// Attention state. KvPool is the paged store every sequence shares: K and V of every
// attention layer in fixed-size blocks, stored head-major: [kv_layer][kv_head][block]
// [block_size][head_dim]. Attention streams one head's rows, so they are contiguous within a
// block (8 KB at head_dim 128, f32) and across consecutive physical blocks (a sequence's blocks
// are often allocated in order); token-major rows (Qwen3: 8 KV heads of 128) put each 512-byte
// head row 4 KB from the next, and attention read them at about half the bandwidth. Kept in
// f32, bf16, or fp8 (e4m3 / e5m2, unscaled with saturation, as vLLM's fp8 cache with scale 1).
// A sequence owns a block table (logical block i -> physical block); attention reads a block's
// rows of one head through k_rows_f32 / v_rows_f32, which widen other precisions to f32.
// KvCache is one sequence with a private pool and a contiguous block table (CLI, tests).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/state_cache.h"

namespace zen {

enum class KvDType { F32, BF16, F8_E4M3, F8_E5M2 };

// --kv-cache-quant {auto,f32,bf16,fp8,fp8_e4m3,fp8_e5m2}; auto is f32 on the CPU (exact).
KvDType parse_kv_cache_quant(const std::string& value);  // throws naming the accepted values
const char* kv_dtype_name(KvDType t);
size_t kv_dtype_bytes(KvDType t);

class KvPool {
 public:
  static constexpr int64_t kDefaultBlockSize = 16;
  KvPool(const ModelConfig& cfg, int64_t num_blocks, KvDType dtype = KvDType::F32,
         int64_t block_size = kDefaultBlockSize);
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_layers() const { return layers_; }  // attention layers holding KV
  KvDType dtype() const { return dtype_; }
  size_t bytes_per_token() const;  // all KV layers, K and V
  size_t bytes_per_block() const { return bytes_per_token() * static_cast<size_t>(block_size_); }
  // KV bytes per token of a config (full-attention layers only) at a precision.
  static size_t bytes_per_token(const ModelConfig& cfg, KvDType dtype);

  // Writes one token's K and V rows ([kv_heads * head_dim] each) at position pos of the
  // sequence whose block table is blocks. layer: KV layer index (ModelConfig::kv_layer_index).
  void store(int layer, std::span<const int32_t> blocks, int64_t pos, const float* k, const float* v);
  // scores[j] = q . K[layer][pos j][kv_head] * scale, j in [0, n)
  void key_scores(int layer, std::span<const int32_t> blocks, int64_t kv_head, const float* q, float scale,
                  int64_t n, float* scores) const;
  // out = sum_j weights[j] * V[layer][pos j][kv_head], j in [0, n), accumulated in order of j
  void weighted_values(int layer, std::span<const int32_t> blocks, int64_t kv_head, const float* weights,
                       int64_t n, float* out) const;
  // Single-key forms (tests; each equals the batched element exactly).
  float dot_k(int layer, std::span<const int32_t> blocks, int64_t pos, int64_t kv_head, const float* q) const;
  void axpy_v(int layer, std::span<const int32_t> blocks, int64_t pos, int64_t kv_head, float a, float* out) const;
  // Rows [first, first + count) of one physical block, head kv_head, as f32: out[count, head_dim].
  // f32 caches return a pointer into the pool, other precisions are decoded into out; either
  // way the row stride (head_dim) is returned in *stride.
  const float* k_rows_f32(int layer, int32_t block, int64_t first, int64_t count, int64_t kv_head, float* out,
                          int64_t* stride) const;
  const float* v_rows_f32(int layer, int32_t block, int64_t first, int64_t count, int64_t kv_head, float* out,
                          int64_t* stride) const;
  // Copies every layer's K and V of block src into block dst (copy-on-write of shared blocks).
  void copy_block(int32_t src, int32_t dst);

 private:
  // Byte offset of head kv_head's row at `slot` of physical block `block`.
  size_t head_row_offset(int layer, int64_t block, int64_t slot, int64_t kv_head) const;
  // The same for position pos of the sequence whose block table is blocks (checked).
  size_t head_row_offset(int layer, std::span<const int32_t> blocks, int64_t pos, int64_t kv_head) const;
  const float* rows_f32(const uint8_t* base, int layer, int32_t block, int64_t first, int64_t count, int64_t kv_head,
                        float* out, int64_t* stride) const;
  KvDType dtype_;
  int64_t num_blocks_, block_size_, layers_;
  int64_t head_dim_, kv_heads_;
  // Left uninitialised: large allocations are mapped lazily, so a big pool costs resident
  // memory only as sequences fill it (attention never reads a slot before it is stored).
  std::unique_ptr<uint8_t[]> k_, v_;
};

// One sequence: a private pool with capacity tokens, blocks 0, 1, 2, ... in order, and, for
// hybrid models, one recurrent-state slot.
class KvCache {
 public:
  KvCache(const ModelConfig& cfg, int64_t capacity, KvDType dtype = KvDType::F32);
  int64_t size() const { return n_past_; }  // tokens already in the cache
  int64_t capacity() const { return capacity_; }
  KvDType dtype() const { return pool_.dtype(); }
  size_t bytes_per_token() const { return pool_.bytes_per_token(); }
  void clear();  // also zeroes the recurrent state
  // Drops tokens from position n on. A recurrent state cannot be rewound: with one, only
  // n == size() or n == 0 is allowed.
  void truncate(int64_t n);
  void advance(int64_t n) { n_past_ += n; }

  KvPool& pool() { return pool_; }
  const KvPool& pool() const { return pool_; }
  std::span<const int32_t> blocks() const { return blocks_; }
  StatePool* states() { return states_.get(); }  // null for models without recurrent layers
  int32_t state_slot() const { return states_ ? 0 : -1; }

  // Contiguous-sequence forms of KvPool's accessors.
  void store(int layer, int64_t pos, const float* k, const float* v);
  float dot_k(int layer, int64_t pos, int64_t kv_head, const float* q) const {
    return pool_.dot_k(layer, blocks_, pos, kv_head, q);
  }
  void axpy_v(int layer, int64_t pos, int64_t kv_head, float a, float* out) const {
    pool_.axpy_v(layer, blocks_, pos, kv_head, a, out);
  }
  void key_scores(int layer, int64_t kv_head, const float* q, float scale, int64_t n, float* scores) const {
    pool_.key_scores(layer, blocks_, kv_head, q, scale, n, scores);
  }
  void weighted_values(int layer, int64_t kv_head, const float* weights, int64_t n, float* out) const {
    pool_.weighted_values(layer, blocks_, kv_head, weights, n, out);
  }

 private:
  KvPool pool_;
  int64_t capacity_;
  int64_t n_past_ = 0;
  std::vector<int32_t> blocks_;
  std::unique_ptr<StatePool> states_;
};

}  // namespace zen
