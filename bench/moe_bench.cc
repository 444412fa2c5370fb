// Decode speed of a sparse MoE model against a dense model with the same active parameters
// (tools/make_moe_bench_models.py writes the pair). The models run alternately, each rep a
// prefill of a fixed prompt and then greedy single-token decode steps; medians over reps.
//
//   zen_moe_bench [--dense DIR] [--moe DIR] [--reps 3] [--prompt 32] [--decode 64] [--threads 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "model/model.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string dense = "build/moe_bench_models/dense";
  std::string moe = "build/moe_bench_models/moe";
  int reps = 3, prompt = 32, decode = 64, threads = 2;
};

struct Rep {
  double prefill_tok_s, decode_tok_s;
};

Rep run_once(zen::Model& model, const Options& o) {
  const int64_t V = model.config().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt));
  for (int i = 0; i < o.prompt; ++i) prompt[i] = static_cast<int32_t>(3 + (i * 7919) % (V - 3));
  auto cache = model.new_cache(o.prompt + o.decode);
  std::vector<float> logits(static_cast<size_t>(V));
  auto t0 = Clock::now();
  model.forward(*cache, prompt, logits.data(), /*all_logits=*/false);
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int i = 0; i < o.decode; ++i) {
    const int32_t next[1] = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    model.forward(*cache, next, logits.data(), /*all_logits=*/false);
  }
  const double decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return {o.prompt / prefill_s, o.decode / decode_s};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double weight_mb(const zen::Model& m) { return static_cast<double>(m.checkpoint().total_bytes()) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--dense") o.dense = value;
    else if (key == "--moe") o.moe = value;
    else if (key == "--reps") o.reps = std::atoi(value.c_str());
    else if (key == "--prompt") o.prompt = std::atoi(value.c_str());
    else if (key == "--decode") o.decode = std::atoi(value.c_str());
    else if (key == "--threads") o.threads = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  try {
    const zen::LoadOptions load{.n_threads = o.threads, .load_tokenizer = false};
    auto dense = zen::Model::load(o.dense, load);
    auto moe = zen::Model::load(o.moe, load);
    const auto& mc = moe->config();
    std::printf("dense: %s (%.0f MB, intermediate %lld)\n", o.dense.c_str(), weight_mb(*dense),
                static_cast<long long>(dense->config().intermediate_size));
    std::printf("moe:   %s (%.0f MB, %lld experts, top-%lld, expert intermediate %lld)\n", o.moe.c_str(),
                weight_mb(*moe), static_cast<long long>(mc.num_experts), static_cast<long long>(mc.num_experts_per_tok),
                static_cast<long long>(mc.moe_intermediate_size));
    std::printf("%d threads, prompt %d, decode %d, %d reps (alternating, first of each rep swaps)\n", o.threads,
                o.prompt, o.decode, o.reps);
    run_once(*dense, o);  // warm the page cache and scratch buffers
    run_once(*moe, o);
    std::vector<double> dp, dd, mp, md;
    for (int r = 0; r < o.reps; ++r) {
      const bool dense_first = r % 2 == 0;
      for (int k = 0; k < 2; ++k) {
        const bool is_dense = (k == 0) == dense_first;
        const Rep rep = run_once(is_dense ? *dense : *moe, o);
        (is_dense ? dp : mp).push_back(rep.prefill_tok_s);
        (is_dense ? dd : md).push_back(rep.decode_tok_s);
        std::printf("  rep %d %-5s prefill %8.1f tok/s  decode %7.1f tok/s\n", r, is_dense ? "dense" : "moe",
                    rep.prefill_tok_s, rep.decode_tok_s);
      }
    }
    std::printf("median  dense: prefill %.1f decode %.1f tok/s | moe: prefill %.1f decode %.1f tok/s\n", median(dp),
                median(dd), median(mp), median(md));
    std::printf("decode dense/moe = %.2fx (target <= 1.5x); prefill dense/moe = %.2fx\n", median(dd) / median(md),
                median(dp) / median(mp));
  } catch (const zen::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
