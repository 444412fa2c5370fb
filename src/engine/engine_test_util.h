// Helpers shared by the engine's tests: run prompts to completion, random prompts, a KV pool
// of an exact size, greedy parameters, a two-sample chi-square.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace zen::test {

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<GeneratedToken> details;
  std::string finish_reason;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, completion_tokens = 0;
  int updates_after_finish = 0;
};

// Adds every prompt, runs the engine until idle on this thread, returns outcomes in order.
inline std::vector<Outcome> run_all(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                             const RequestParams& params) {
  std::vector<Outcome> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Outcome* o = &out[i];
    const AddResult r = engine.add(prompts[i], params, [o](const RequestUpdate& u) {
      if (!o->finish_reason.empty()) ++o->updates_after_finish;
      for (const GeneratedToken& g : u.tokens) {
        o->tokens.push_back(g.token);
        o->details.push_back(g);
      }
      if (u.finished) {
        o->finish_reason = u.finish_reason;
        o->prompt_tokens = u.prompt_tokens;
        o->cached_prompt_tokens = u.cached_prompt_tokens;
        o->completion_tokens = u.completion_tokens;
      }
    });
    EXPECT_EQ(r.status, AddStatus::Ok) << r.message;
  }
  engine.run_until_idle();
  return out;
}

inline std::vector<std::vector<int32_t>> random_prompts(int count, int min_len, int max_len, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(count));
  for (auto& p : prompts) {
    p.resize(static_cast<size_t>(min_len + static_cast<int>(rng() % static_cast<uint32_t>(max_len - min_len + 1))));
    for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  }
  return prompts;
}

// Engine options with a KV pool of exactly kv_blocks blocks.
inline EngineOptions pool_of(const Model& model, int64_t kv_blocks, int64_t batched_tokens) {
  EngineOptions o;
  o.kv_memory_bytes = kv_blocks * static_cast<int64_t>(KvPool::bytes_per_token(model.config(), o.kv_dtype)) *
                      o.block_size;
  o.max_num_batched_tokens = batched_tokens;
  return o;
}

// Greedy, EOS ignored: every request produces exactly max_tokens.
inline RequestParams greedy(int64_t max_tokens) {
  RequestParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// The tiny Qwen3 fixture both engine test suites run on (the caller owns it).
inline Model* load_tiny_qwen3() {
  return Model::load(std::string(ZEN_SOURCE_DIR) + "/tests/fixtures/models/qwen3_f32", {.n_threads = 2, .load_tokenizer = false})
      .release();
}

// Two-sample chi-square: do the token counts a and b come from one distribution? Bins with
// fewer than 10 expected samples are pooled. Returns the statistic over its 99.9% critical
// value (Wilson-Hilferty), so < 1 passes.
inline double chi_square_ratio(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b) {
  std::map<int32_t, std::pair<double, double>> bins;
  double na = 0, nb = 0;
  for (const auto& [t, c] : a) bins[t].first += c, na += c;
  for (const auto& [t, c] : b) bins[t].second += c, nb += c;
  std::vector<std::pair<double, double>> pooled{{0, 0}};
  for (const auto& [t, ab] : bins) {
    if ((ab.first + ab.second) * std::min(na, nb) / (na + nb) < 10) {
      pooled[0].first += ab.first, pooled[0].second += ab.second;
    } else {
      pooled.push_back(ab);
    }
  }
  double stat = 0;
  int used = 0;
  for (const auto& [x, y] : pooled) {
    if (x + y == 0) continue;
    const double d = x * std::sqrt(nb / na) - y * std::sqrt(na / nb);
    stat += d * d / (x + y);
    ++used;
  }
  const double df = std::max(1, used - 1);
  const double z = 3.09;  // 99.9%
  const double crit = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  return stat / crit;
}

}  // namespace zen::test
