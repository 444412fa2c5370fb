// A loaded causal LM of the family: config, weights (views into the mapped checkpoint),
// tokenizer, and a forward pass over a per-sequence KV cache.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace zen {

class ThreadPool;

struct LoadOptions {
  int n_threads = 0;           // 0: all cores
  bool load_tokenizer = true;  // false for tokenizer-less fixtures
  // false: load despite missing/unexpected tensors so `zen inspect` can report them; such a
  // model refuses to run.
  bool strict = true;
};

// Per-sequence attention state: K and V for every layer, f32, [layer][pos][kv_heads*head_dim].
class KvCache {
 public:
  KvCache(const ModelConfig& cfg, int64_t capacity);
  int64_t size() const { return n_past_; }  // tokens already in the cache
  int64_t capacity() const { return capacity_; }
  void clear() { n_past_ = 0; }
  void truncate(int64_t n);  // drop tokens from position n on
  float* k(int layer, int64_t pos);
  float* v(int layer, int64_t pos);
  void advance(int64_t n) { n_past_ += n; }

 private:
  int64_t capacity_;
  int64_t n_past_ = 0;
  int64_t row_;     // kv_heads * head_dim
  int64_t layer_stride_;
  std::vector<float> k_, v_;
};

class Model {
 public:
  virtual ~Model() = default;
  // Opens any supported checkpoint (HF folder, .safetensors with config.json, .gguf).
  // Strict: throws zen::Error listing missing/mismatched/unexpected tensors.
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opts = {});

  virtual const ModelConfig& config() const = 0;
  virtual const Tokenizer* tokenizer() const = 0;  // null when not loaded
  virtual const Checkpoint& checkpoint() const = 0;
  virtual ThreadPool& pool() = 0;
  virtual void attach_tokenizer(std::unique_ptr<Tokenizer> tok) = 0;

  std::unique_ptr<KvCache> new_cache(int64_t capacity) const {
    return std::make_unique<KvCache>(config(), capacity);
  }
  // Appends tokens at positions cache.size() ... and writes logits: [tokens.size(), vocab]
  // when all_logits, else only the last token's row [vocab].
  virtual void forward(KvCache& cache, std::span<const int32_t> tokens, float* logits,
                       bool all_logits) = 0;
};

}  // namespace zen
