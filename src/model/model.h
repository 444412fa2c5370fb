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
#include "model/kv_cache.h"
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

  std::unique_ptr<KvCache> new_cache(int64_t capacity, KvDType dtype = KvDType::F32) const {
    return std::make_unique<KvCache>(config(), capacity, dtype);
  }
  // Appends tokens at positions cache.size() ... and writes logits: [tokens.size(), vocab]
  // when all_logits, else only the last token's row [vocab].
  virtual void forward(KvCache& cache, std::span<const int32_t> tokens, float* logits,
                       bool all_logits) = 0;
};

}  // namespace zen
