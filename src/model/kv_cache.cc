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

KvPool::KvPool(const ModelConfig& cfg, int64_t num_blocks, KvDType dtype, int64_t block_size)
    : dtype_(dtype),
      num_blocks_(num_blocks),
      block_size_(block_size),
      layers_(cfg.num_kv_layers()),
      head_dim_(cfg.head_dim),
      kv_heads_(cfg.num_kv_heads) {
  if (num_blocks <= 0) fail("KV pool needs at least one block, got ", num_blocks);
  if (block_size <= 0) fail("KV block size must be positive, got ", block_size);
  const size_t total = static_cast<size_t>(layers_) * static_cast<size_t>(num_blocks_) *
                       static_cast<size_t>(block_size_) * static_cast<size_t>(kv_heads_ * head_dim_) *
                       kv_dtype_bytes(dtype);
  k_.reset(new uint8_t[total]);
  v_.reset(new uint8_t[total]);
}

size_t KvPool::bytes_per_token(const ModelConfig& cfg, KvDType dtype) {
  const int64_t layers = std::max(cfg.num_kv_layers(), cfg.kv_budget_layers);
  return 2 * static_cast<size_t>(layers) * static_cast<size_t>(cfg.num_kv_heads * cfg.head_dim) * kv_dtype_bytes(dtype);
}

size_t KvPool::bytes_per_token() const {
  return 2 * static_cast<size_t>(layers_) * static_cast<size_t>(kv_heads_ * head_dim_) * kv_dtype_bytes(dtype_);
}

size_t KvPool::head_row_offset(int layer, int64_t block, int64_t slot, int64_t kv_head) const {
  const int64_t row = ((static_cast<int64_t>(layer) * kv_heads_ + kv_head) * num_blocks_ + block) * block_size_ + slot;
  return static_cast<size_t>(row * head_dim_) * kv_dtype_bytes(dtype_);
}

size_t KvPool::head_row_offset(int layer, std::span<const int32_t> blocks, int64_t pos, int64_t kv_head) const {
  const int64_t logical = pos / block_size_;
  ZEN_CHECK(layer >= 0 && layer < layers_, "KV layer ", layer, " of ", layers_);
  ZEN_CHECK(kv_head >= 0 && kv_head < kv_heads_, "KV head ", kv_head, " of ", kv_heads_);
  ZEN_CHECK(pos >= 0 && logical < static_cast<int64_t>(blocks.size()), "KV position ", pos, " beyond the ",
            blocks.size(), " blocks of the sequence");
  const int64_t block = blocks[static_cast<size_t>(logical)];
  ZEN_CHECK(block >= 0 && block < num_blocks_, "KV block ", block, " outside the pool of ", num_blocks_);
  return head_row_offset(layer, block, pos % block_size_, kv_head);
}

void KvPool::store(int layer, std::span<const int32_t> blocks, int64_t pos, const float* k, const float* v) {
  for (int64_t h = 0; h < kv_heads_; ++h) {
    const size_t off = head_row_offset(layer, blocks, pos, h);
    encode_row(dtype_, k + h * head_dim_, &k_[off], head_dim_);
    encode_row(dtype_, v + h * head_dim_, &v_[off], head_dim_);
  }
}

const float* KvPool::rows_f32(const uint8_t* base, int layer, int32_t block, int64_t first, int64_t count,
                             int64_t kv_head, float* out, int64_t* stride) const {
  ZEN_CHECK(block >= 0 && block < num_blocks_ && first >= 0 && first + count <= block_size_, "KV rows ", first, "+",
            count, " of block ", block);
  ZEN_CHECK(kv_head >= 0 && kv_head < kv_heads_, "KV head ", kv_head, " of ", kv_heads_);
  const uint8_t* p = base + head_row_offset(layer, block, first, kv_head);
  *stride = head_dim_;
  // The head's rows are one contiguous run (head-major layout): decode it in one pass.
  const int64_t n = count * head_dim_;
  switch (dtype_) {
    case KvDType::F32: return reinterpret_cast<const float*>(p);
    case KvDType::BF16: kernels::bf16_to_f32_row(reinterpret_cast<const uint16_t*>(p), out, n); break;
    case KvDType::F8_E4M3: kernels::dequantize_e4m3(p, out, n); break;
    case KvDType::F8_E5M2: kernels::dequantize_e5m2(p, out, n); break;
  }
  return out;
}

const float* KvPool::k_rows_f32(int layer, int32_t block, int64_t first, int64_t count, int64_t kv_head, float* out,
                                int64_t* stride) const {
  return rows_f32(k_.get(), layer, block, first, count, kv_head, out, stride);
}

const float* KvPool::v_rows_f32(int layer, int32_t block, int64_t first, int64_t count, int64_t kv_head, float* out,
                                int64_t* stride) const {
  return rows_f32(v_.get(), layer, block, first, count, kv_head, out, stride);
}

void KvPool::copy_block(int32_t src, int32_t dst) {
  ZEN_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_, "copy_block ", src, " -> ", dst);
  const size_t head_block_bytes = static_cast<size_t>(block_size_ * head_dim_) * kv_dtype_bytes(dtype_);
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t h = 0; h < kv_heads_; ++h) {
      const size_t from = head_row_offset(static_cast<int>(l), src, 0, h);
      const size_t to = head_row_offset(static_cast<int>(l), dst, 0, h);
      std::memcpy(&k_[to], &k_[from], head_block_bytes);
      std::memcpy(&v_[to], &v_[from], head_block_bytes);
    }
}

float KvPool::dot_k(int layer, std::span<const int32_t> blocks, int64_t pos, int64_t kv_head, const float* q) const {
  const uint8_t* k = &k_[head_row_offset(layer, blocks, pos, kv_head)];
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

void KvPool::axpy_v(int layer, std::span<const int32_t> blocks, int64_t pos, int64_t kv_head, float a,
                    float* out) const {
  const uint8_t* v = &v_[head_row_offset(layer, blocks, pos, kv_head)];
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

// Walks a block at a time so the inner loops see contiguous rows.
void KvPool::key_scores(int layer, std::span<const int32_t> blocks, int64_t kv_head, const float* q, float scale,
                        int64_t n, float* scores) const {
  if (dtype_ != KvDType::F32) {
    for (int64_t j = 0; j < n; ++j) scores[j] = dot_k(layer, blocks, j, kv_head, q) * scale;
    return;
  }
  for (int64_t b0 = 0; b0 < n; b0 += block_size_) {
    const auto* k = reinterpret_cast<const float*>(&k_[head_row_offset(layer, blocks, b0, kv_head)]);
    const int64_t end = std::min(n, b0 + block_size_);
    for (int64_t j = b0; j < end; ++j) scores[j] = kernels::dot_f32(q, k + (j - b0) * head_dim_, head_dim_) * scale;
  }
}

void KvPool::weighted_values(int layer, std::span<const int32_t> blocks, int64_t kv_head, const float* weights,
                             int64_t n, float* out) const {
  std::fill(out, out + head_dim_, 0.0f);
  if (dtype_ != KvDType::F32) {
    for (int64_t j = 0; j < n; ++j) axpy_v(layer, blocks, j, kv_head, weights[j], out);
    return;
  }
  for (int64_t b0 = 0; b0 < n; b0 += block_size_) {
    const auto* v = reinterpret_cast<const float*>(&v_[head_row_offset(layer, blocks, b0, kv_head)]);
    const int64_t end = std::min(n, b0 + block_size_);
    for (int64_t j = b0; j < end; ++j) kernels::axpy_f32(weights[j], v + (j - b0) * head_dim_, out, head_dim_);
  }
}

namespace {
int64_t blocks_for(int64_t tokens) {
  if (tokens <= 0) fail("KV cache capacity must be positive, got ", tokens);
  return (tokens + KvPool::kDefaultBlockSize - 1) / KvPool::kDefaultBlockSize;
}
}  // namespace

KvCache::KvCache(const ModelConfig& cfg, int64_t capacity, KvDType dtype)
    : pool_(cfg, blocks_for(capacity), dtype), capacity_(capacity) {
  blocks_.resize(static_cast<size_t>(pool_.num_blocks()));
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i] = static_cast<int32_t>(i);
  const int64_t state_floats = recurrent_state_floats(cfg);
  if (state_floats > 0) {
    states_ = std::make_unique<StatePool>(state_floats, 1);
    states_->zero(0);
  }
}

void KvCache::store(int layer, int64_t pos, const float* k, const float* v) {
  ZEN_CHECK(pos >= 0 && pos < capacity_, "KV position ", pos, " outside capacity ", capacity_);
  pool_.store(layer, blocks_, pos, k, v);
}

void KvCache::clear() {
  n_past_ = 0;
  if (states_) states_->zero(0);
}

void KvCache::truncate(int64_t n) {
  ZEN_CHECK(n >= 0 && n <= n_past_, "truncate to ", n, " of ", n_past_);
  if (n == 0) return clear();
  if (states_ && n != n_past_) fail("a recurrent state cannot be rewound from ", n_past_, " to ", n, " tokens");
  n_past_ = n;
}

}  // namespace zen
