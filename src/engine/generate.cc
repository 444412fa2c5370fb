#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "base/error.h"

namespace zen {
namespace {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Minimal .npy (v1.0) writer for a 2-D little-endian f32 array, written row block by block.
class NpyWriter {
 public:
  NpyWriter(const std::string& path, int64_t rows, int64_t cols) : f_(std::fopen(path.c_str(), "wb")) {
    if (f_ == nullptr) fail("cannot write ", path);
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                         std::to_string(cols) + "), }";
    const size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header.push_back('\n');
    const uint16_t len = static_cast<uint16_t>(header.size());
    std::fwrite("\x93NUMPY\x01\x00", 1, 8, f_);
    std::fwrite(&len, 2, 1, f_);
    std::fwrite(header.data(), 1, header.size(), f_);
  }
  ~NpyWriter() {
    if (f_ != nullptr) std::fclose(f_);
  }
  void write(const float* data, size_t n) {
    if (std::fwrite(data, sizeof(float), n, f_) != n) fail("short write to the .npy file");
  }

 private:
  std::FILE* f_;
};

}  // namespace

bool is_stop_token(const Model& model, int32_t id) {
  const auto& eos = model.config().eos_token_ids;
  if (std::find(eos.begin(), eos.end(), id) != eos.end()) return true;
  if (const Tokenizer* tok = model.tokenizer()) {
    const auto& stops = tok->stop_ids();
    return std::find(stops.begin(), stops.end(), id) != stops.end();
  }
  return false;
}

GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opts,
                        const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) fail("the prompt is empty (no tokens)");
  if (opts.max_tokens < 0) fail("max_tokens must be >= 0, got ", opts.max_tokens);
  const ModelConfig& cfg = model.config();
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt + opts.max_tokens > cfg.max_position_embeddings)
    fail("prompt (", n_prompt, " tokens) + max_tokens (", opts.max_tokens, ") exceeds the context window of ",
         cfg.max_position_embeddings, " tokens");
  GenerateResult result;
  result.prompt_tokens = n_prompt;
  result.finish_reason = "length";
  auto cache = model.new_cache(n_prompt + opts.max_tokens, opts.kv_dtype);
  Sampler sampler(opts.sampling, prompt);
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));

  const double t0 = now_seconds();
  for (int64_t start = 0; start < n_prompt; start += opts.prefill_chunk) {
    const int64_t len = std::min(opts.prefill_chunk, n_prompt - start);
    model.forward(*cache, prompt.subspan(static_cast<size_t>(start), static_cast<size_t>(len)), logits.data(), false,
                  sampler.argmax_of_raw_logits());
  }
  const double t1 = now_seconds();
  result.prefill_seconds = t1 - t0;

  for (int64_t i = 0; i < opts.max_tokens; ++i) {
    if (i > 0)
      model.forward(*cache, std::span<const int32_t>(&result.tokens.back(), 1), logits.data(), false,
                    sampler.argmax_of_raw_logits());
    const int32_t next = sampler.sample(logits.data(), cfg.vocab_size);
    sampler.accept(next);
    if (!opts.ignore_eos && is_stop_token(model, next)) {
      result.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(next);
    if (on_token && !on_token(next)) {
      result.finish_reason = "stop";
      break;
    }
  }
  result.decode_seconds = now_seconds() - t1;
  return result;
}

PerplexityResult perplexity(Model& model, std::span<const int32_t> tokens, int64_t ctx, int64_t max_chunks,
                            const std::string& dump_path, int64_t batch, KvDType kv_dtype) {
  const ModelConfig& cfg = model.config();
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (ctx < 2) fail("--ctx must be at least 2, got ", ctx);
  if (ctx > cfg.max_position_embeddings)
    fail("--ctx ", ctx, " exceeds the model's context window of ", cfg.max_position_embeddings);
  if (n_tokens < 2) fail("the text has ", n_tokens, " tokens; perplexity needs at least 2");
  int64_t n_chunks = (n_tokens + ctx - 1) / ctx;
  if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
  const int64_t evaluated = std::min(n_tokens, n_chunks * ctx);
  const int64_t V = cfg.vocab_size;

  std::unique_ptr<NpyWriter> dump;
  if (!dump_path.empty()) dump = std::make_unique<NpyWriter>(dump_path, evaluated, V);
  auto cache = model.new_cache(std::min(ctx, evaluated), kv_dtype);
  std::vector<float> logits(static_cast<size_t>(batch * V));
  PerplexityResult r;
  double nll_sum = 0;
  const double t0 = now_seconds();
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t begin = c * ctx, end = std::min(n_tokens, begin + ctx);
    cache->clear();
    for (int64_t s = begin; s < end; s += batch) {
      const int64_t len = std::min(batch, end - s);
      model.forward(*cache, tokens.subspan(static_cast<size_t>(s), static_cast<size_t>(len)), logits.data(), true);
      if (dump) dump->write(logits.data(), static_cast<size_t>(len * V));
      for (int64_t i = 0; i < len; ++i) {
        const int64_t target = s + i + 1;
        if (target >= end) break;
        const float* row = &logits[static_cast<size_t>(i * V)];
        double max_l = row[0];
        for (int64_t v = 1; v < V; ++v) max_l = std::max(max_l, static_cast<double>(row[v]));
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - max_l);
        const double log_prob = static_cast<double>(row[tokens[static_cast<size_t>(target)]]) - max_l - std::log(sum);
        nll_sum -= log_prob;
        ++r.tokens_scored;
      }
    }
  }
  r.seconds = now_seconds() - t0;
  r.mean_nll = nll_sum / static_cast<double>(r.tokens_scored);
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace zen
