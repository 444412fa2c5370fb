// Single-sequence generation and perplexity over a Model (the CLI's jobs; the serving
// engine with batching comes later).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "model/model.h"

namespace zen {

struct GenerateOptions {
  int64_t max_tokens = 256;
  bool ignore_eos = false;
  // Tokens per forward during prefill. Activation buffers grow with it (~70 KB a token on
  // Qwen3-0.6B) while the matmuls reuse weights over 64-token tiles anyway, so 256 costs no
  // speed and keeps peak RSS near weights + KV.
  int64_t prefill_chunk = 256;
  KvDType kv_dtype = KvDType::F32;
  SamplingParams sampling;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (without the prompt)
  std::string finish_reason;    // "stop" (a stop token) or "length"
  double prefill_seconds = 0;
  double decode_seconds = 0;     // time for tokens after the first
  int64_t prompt_tokens = 0;
};

// Calls on_token(id) for each generated token; returning false stops generation early.
// Whether id ends generation: one of the model's EOS ids or the tokenizer's stop ids.
bool is_stop_token(const Model& model, int32_t id);

GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opts,
                        const std::function<bool(int32_t)>& on_token = {});

struct PerplexityResult {
  int64_t tokens_scored = 0;
  double mean_nll = 0;
  double perplexity = 0;
  double seconds = 0;
};

// Splits tokens into windows of ctx (at most max_chunks of them when > 0); within each window
// scores every token after the first from its prefix. When dump_path is non-empty, writes the
// f32 logits of every evaluated token as a .npy [tokens, vocab].
PerplexityResult perplexity(Model& model, std::span<const int32_t> tokens, int64_t ctx, int64_t max_chunks,
                            const std::string& dump_path = "", int64_t batch = 256,
                            KvDType kv_dtype = KvDType::F32);

}  // namespace zen
