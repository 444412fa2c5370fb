// Token sampling: logit bias, penalties, then greedy (temperature 0) or temperature + top-k + top-p +
// min-p over the softmax, drawn from a seeded generator (same seed, same output).
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace zen {

namespace grammar {
class Matcher;
}

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keeps tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // HF/vLLM: over prompt and output; >1 discourages
  float presence_penalty = 0.0f;    // OpenAI: over output tokens
  float frequency_penalty = 0.0f;   // OpenAI: over output tokens, per occurrence
  // OpenAI logit_bias: added to a token's logit before the penalties and sampling, greedy
  // included; -100 / 100 in effect ban / force a token. Each in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  static constexpr size_t kMaxLogitBias = 1024;
  uint64_t seed = 0;
  bool has_seed = false;            // false: seeded from std::random_device

  void validate() const;  // throws zen::Error naming the offending parameter and its range
};

struct TokenProb {
  int32_t token;
  double p;
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, std::span<const int32_t> prompt);
  ~Sampler();
  // Picks the next token from logits [vocab] (modified in place by penalties).
  int32_t sample(float* logits, int64_t vocab);
  // Records a generated token for the penalties (and advances the grammar).
  void accept(int32_t token);
  // Constrained decoding: tokens the grammar forbids get -inf after the bias and penalties, on
  // every path that samples (plain decoding and speculative verification alike); accept()
  // advances it. When it forbids every token (the grammar ended and EOS is ignored), the
  // stop tokens stay allowed.
  void set_grammar(std::unique_ptr<grammar::Matcher> matcher);
  grammar::Matcher* grammar() const { return grammar_.get(); }

  // The distribution sample() draws from, for speculative rejection sampling: logit bias,
  // penalties, temperature, top-k / top-p / min-p, normalised, most likely first (a single
  // entry with p = 1 when greedy). Edits logits in place; the span lives until the next call.
  std::span<const TokenProb> distribution(float* logits, int64_t vocab);
  bool greedy() const { return p_.temperature == 0.0f || p_.top_k == 1; }
  // Greedy over the raw logits: no bias, penalty or grammar changes them first, so only each
  // row's argmax matters (ForwardBatch::argmax_only).
  bool argmax_of_raw_logits() const {
    return greedy() && p_.logit_bias.empty() && p_.repetition_penalty == 1.0f && p_.presence_penalty == 0.0f &&
           p_.frequency_penalty == 0.0f && !grammar_;
  }
  const SamplingParams& params() const { return p_; }
  // From the request's seeded generator: a uniform double in [0, 1), and a draw from a
  // distribution (probabilities summing to `total`).
  double uniform();
  int32_t draw(std::span<const TokenProb> dist, double total = 1.0);

 private:
  void adjust_logits(float* logits, int64_t vocab) const;  // logit bias, penalties, grammar
  void apply_grammar(float* logits, int64_t vocab) const;
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<int32_t> seen_;  // prompt + output tokens, deduplicated via seen_set_
  std::unordered_map<int32_t, bool> seen_set_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
  std::vector<TokenProb> dist_;                        // scratch
  std::unique_ptr<grammar::Matcher> grammar_;
  mutable std::vector<uint64_t> mask_;                 // scratch: allowed-token bits
};

int32_t argmax(const float* logits, int64_t vocab);

}  // namespace zen
