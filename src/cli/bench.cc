// `zen bench`: offline serving benchmark (no HTTP). A matrix of concurrency levels x workloads
// x repeats, each cell one wave of requests submitted together, reporting aggregate output
// tokens/s, TTFT p50/p95 and per-stream decode tokens/s; then a warm-versus-cold table for
// shared prefixes. Prints tables and writes the same numbers as JSON.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/parallel_flags.h"
#include "cli/speculative_flags.h"
#include "engine/engine.h"

namespace zen::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Workload {
  std::string name;
  int64_t prompt_tokens, output_tokens;
};

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v <= 0) throw std::invalid_argument("");
      out.push_back(v);
    } catch (const std::exception&) {
      fail("--", flag, " takes positive integers separated by commas, got '", text, "'");
    }
  }
  if (out.empty()) fail("--", flag, " is empty");
  return out;
}

// NAME:PROMPT:OUTPUT,...
std::vector<Workload> parse_workloads(const std::string& text) {
  std::vector<Workload> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t a = item.find(':'), b = item.rfind(':');
    if (a == std::string::npos || a == b) fail("--workloads entries are NAME:PROMPT_TOKENS:OUTPUT_TOKENS, got '", item, "'");
    const auto nums = parse_int_list("workloads", item.substr(a + 1, b - a - 1) + "," + item.substr(b + 1));
    out.push_back({item.substr(0, a), nums[0], nums[1]});
  }
  if (out.empty()) fail("--workloads is empty");
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::clamp(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5, 0.0,
                                                   static_cast<double>(v.size() - 1)));
  return v[rank];
}

// The middle value, or the mean of the middle two.
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Random ids from a plain-text range of the vocabulary: no prefix is shared by accident.
std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
  const auto hi = static_cast<uint32_t>(std::max<int64_t>(2, std::min<int64_t>(vocab, 30000)));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(1 + rng() % (hi - 1));
  return t;
}

struct RequestTiming {
  Clock::time_point added, first, last;
  std::vector<Clock::time_point> token_times;  // when each token arrived
  int64_t tokens = 0, cached = 0;
  std::string reason;
};

// Submits all prompts at once and runs the engine until every request finishes.
std::vector<RequestTiming> run_wave(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, int64_t output) {
  std::vector<RequestTiming> t(prompts.size());
  RequestParams params;
  params.max_tokens = output;
  params.ignore_eos = true;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestTiming* r = &t[i];
    r->added = Clock::now();
    const AddResult res = engine.add(prompts[i], params, [r](const RequestUpdate& u) {
      const auto now = Clock::now();
      if (!u.tokens.empty()) {
        if (r->tokens == 0) r->first = now;
        r->last = now;
        r->tokens += static_cast<int64_t>(u.tokens.size());
        r->token_times.insert(r->token_times.end(), u.tokens.size(), now);
      }
      if (u.finished) {
        r->reason = u.finish_reason;
        r->cached = u.cached_prompt_tokens;
      }
    });
    if (res.status != AddStatus::Ok) r->reason = "rejected: " + res.message;
  }
  engine.run_until_idle();
  return t;
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

nlohmann::json run_cell(Engine& engine, const Workload& w, int64_t concurrency, int repeat, std::mt19937& rng) {
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < concurrency; ++i)
    prompts.push_back(random_tokens(rng, w.prompt_tokens, engine.model().config().vocab_size));
  const auto start = Clock::now();
  const auto timings = run_wave(engine, prompts, w.output_tokens);
  const auto end = Clock::now();
  std::vector<double> ttft, stream_tps;
  int64_t output = 0, errors = 0, decoded = 0;
  // The decode window: from the first request's first token to the last request's last token.
  // Tokens after each request's first, over that window, is the aggregate decode rate (the
  // prompts' prefill, before any first token, stays out of it).
  Clock::time_point window_begin = end, window_end = start;
  for (const auto& r : timings) {
    if (r.reason != "length" || r.tokens != w.output_tokens) {
      ++errors;
      continue;
    }
    output += r.tokens;
    ttft.push_back(seconds(r.added, r.first));
    if (r.tokens > 1) stream_tps.push_back(static_cast<double>(r.tokens - 1) / std::max(1e-9, seconds(r.first, r.last)));
    decoded += r.tokens - 1;
    window_begin = std::min(window_begin, r.first);
    window_end = std::max(window_end, r.last);
  }
  const double wall = seconds(start, end);
  const double window = std::max(1e-9, seconds(window_begin, window_end));
  const double decode_tps = decoded > 0 ? static_cast<double>(decoded) / window : 0.0;
  // Steady decode: while every request of the wave is decoding (from the last first token to
  // the first last token), tokens of all requests over that time; no prefill step is inside
  // it. The aggregate decode rate of `concurrency` streams.
  Clock::time_point all_decoding = start, first_done = end;
  for (const auto& r : timings)
    if (r.tokens > 0) {
      all_decoding = std::max(all_decoding, r.first);
      first_done = std::min(first_done, r.last);
    }
  int64_t steady_tokens = 0;
  for (const auto& r : timings)
    for (const auto& at : r.token_times) steady_tokens += at > all_decoding && at <= first_done ? 1 : 0;
  const double steady_s = seconds(all_decoding, first_done);
  const double steady_tps = errors == 0 && steady_s > 0 ? static_cast<double>(steady_tokens) / steady_s : 0.0;
  return {{"workload", w.name}, {"prompt_tokens", w.prompt_tokens}, {"output_tokens", w.output_tokens},
          {"concurrency", concurrency}, {"repeat", repeat}, {"requests", concurrency}, {"errors", errors},
          {"wall_seconds", wall}, {"output_tokens_per_second", static_cast<double>(output) / wall},
          {"decode_tokens_per_second", decode_tps}, {"steady_decode_tokens_per_second", steady_tps},
          {"ttft_p50", percentile(ttft, 50)}, {"ttft_p95", percentile(ttft, 95)},
          {"stream_tps_min", percentile(stream_tps, 0)}, {"stream_tps_p05", percentile(stream_tps, 5)},
          {"stream_tps_p50", percentile(stream_tps, 50)}, {"stream_tps_p95", percentile(stream_tps, 95)},
          {"stream_tps_max", percentile(stream_tps, 100)}};
}

nlohmann::json run_prefix_row(Engine& engine, int64_t length, std::mt19937& rng) {
  const int64_t vocab = engine.model().config().vocab_size;
  const auto prefix = random_tokens(rng, length, vocab);
  auto with_suffix = [&] {
    auto p = prefix;
    const auto s = random_tokens(rng, 16, vocab);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  const auto cold = run_wave(engine, {with_suffix()}, 1);
  const auto warm = run_wave(engine, {with_suffix()}, 1);
  const double cold_s = seconds(cold[0].added, cold[0].first), warm_s = seconds(warm[0].added, warm[0].first);
  const bool ok = cold[0].reason == "length" && warm[0].reason == "length";
  return {{"prefix_tokens", length}, {"cold_ttft", cold_s}, {"warm_ttft", warm_s},
          {"speedup", cold_s / std::max(1e-9, warm_s)}, {"warm_cached_tokens", warm[0].cached},
          {"errors", ok ? 0 : 1}};
}

// Per workload: aggregate decode tok/s at each concurrency over concurrency 1, the batching
// gain a serving engine is chosen for; over the whole decode window (prefill steps of later
// requests included) and over the steady part (every stream decoding). The matrix runs
// repeat by repeat (every level once, then again), and each repeat's ratio divides rates
// measured seconds apart: on a machine whose speed drifts, a ratio of medians taken minutes
// apart would measure the drift. The median of the paired ratios is printed, with their range.
void print_decode_scaling(const nlohmann::json& cells) {
  for (const char* key : {"decode_tokens_per_second", "steady_decode_tokens_per_second"}) {
    // workload -> repeat -> level -> rate
    std::map<std::string, std::map<int64_t, std::map<int64_t, double>>> rates;
    for (const auto& c : cells)
      rates[c["workload"].get<std::string>()][c["repeat"].get<int64_t>()][c["concurrency"].get<int64_t>()] =
          c[key].get<double>();
    for (auto& [name, by_repeat] : rates) {
      std::map<int64_t, std::vector<double>> ratios;  // level -> one ratio per repeat
      for (auto& [repeat, by_level] : by_repeat) {
        if (!by_level.contains(1) || by_level[1] <= 0) continue;
        for (auto& [level, rate] : by_level)
          if (level != 1) ratios[level].push_back(rate / by_level[1]);
      }
      if (ratios.empty()) continue;
      std::printf("%s: %s decode vs concurrency 1:", name.c_str(), key[0] == 's' ? "steady" : "window");
      for (auto& [level, v] : ratios) {
        std::printf("  c%" PRId64 " %.2fx", level, median(v));
        if (v.size() > 1) std::printf(" (%.2f-%.2f)", percentile(v, 0), percentile(v, 100));
      }
      std::printf("\n");
    }
  }
}

}  // namespace

int bench_command(int argc, char** argv) {
  Flags f("bench", with_parallel_flags(with_speculative_flags({{"model", FlagKind::String, "model path (default: the installed default model)", {}},
                    {"concurrency", FlagKind::String, "concurrency levels (default 1,2,4,8,16,32,64)", {}},
                    {"workloads", FlagKind::String, "NAME:PROMPT:OUTPUT tokens, comma-separated (default chat:128:64)", {}},
                    {"repeats", FlagKind::Int, "waves per cell, run level by level in turn (default 1)", {}},
                    {"prefix-lengths", FlagKind::String, "shared-prefix lengths for the warm/cold table (default 512,2048,8192)", {}},
                    {"no-prefix-table", FlagKind::Bool, "skip the warm/cold prefix table", {}},
                    {"no-matrix", FlagKind::Bool, "skip the concurrency matrix", {}},
                    {"max-num-batched-tokens", FlagKind::Int, "token budget per step (default 512)", {}},
                    {"kv-memory", FlagKind::Int, "KV cache bytes (default: a quarter of the available RAM)", {}},
                    {"state-snapshot-memory", FlagKind::Int,
                     "hybrid models: bytes for recurrent-state snapshots of cached prefixes (default: an eighth of the available RAM, at most 64; 0 keeps none)", {}},
                    {"kv-cache-quant", FlagKind::Choice, "KV cache precision", {"auto", "f32", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"}},
                    {"threads", FlagKind::Int, "worker threads (default: all cores)", {}},
                    {"nvfp4-exact", FlagKind::Bool, "NVFP4 with f32 activations (exact, slower; default int8 per block of 32)", {}},
                    {"json", FlagKind::String, "write results here (default zen-bench.json)", {}},
                    {"seed", FlagKind::Int, "prompt generator seed (default 1)", {}},
                    {"help", FlagKind::Bool, "show this help", {}}})));
  f.parse(argc, argv, 2);
  if (f.flag("help")) {
    std::fputs(f.usage().c_str(), stdout);
    return 0;
  }
  const auto levels = parse_int_list("concurrency", f.str("concurrency", "1,2,4,8,16,32,64"));
  const auto workloads = parse_workloads(f.str("workloads", "chat:128:64"));
  const auto prefix_lengths = parse_int_list("prefix-lengths", f.str("prefix-lengths", "512,2048,8192"));
  const int64_t repeats = f.integer("repeats", 1);
  if (repeats < 1) fail("--repeats must be at least 1, got ", repeats);

  LoadOptions load;
  load.n_threads = threads_flag(f);
  load.nvfp4_exact_activations = f.flag("nvfp4-exact");
  load.load_tokenizer = false;
  apply_parallel_flags(f, load);
  const std::string path = resolve_model_path(f.str("model"));
  auto model = Model::load(path, load);
  if (serve_as_worker(*model, load)) return 0;
  EngineOptions opts;
  opts.kv_dtype = parse_kv_cache_quant(f.str("kv-cache-quant", "auto"));
  opts.kv_memory_bytes = f.integer("kv-memory", 0);
  if (f.has("state-snapshot-memory")) {
    opts.state_snapshot_memory_bytes = f.integer("state-snapshot-memory", 0);
    if (opts.state_snapshot_memory_bytes < 0) fail("--state-snapshot-memory must be >= 0");
    if (opts.state_snapshot_memory_bytes == 0) opts.state_snapshot_slots = 0;
  }
  opts.max_num_batched_tokens = f.integer("max-num-batched-tokens", 512);
  opts.max_num_seqs = std::max<int64_t>(64, *std::max_element(levels.begin(), levels.end()));
  opts.max_waiting = 1 << 20;
  apply_speculative_flags(f, opts);
  Engine engine(*model, opts);
  std::printf("model: %s\n%s\n", path.c_str(), engine.describe().c_str());
  std::mt19937 rng(static_cast<uint32_t>(f.integer("seed", 1)));
  nlohmann::json report = {{"model", path}, {"cells", nlohmann::json::array()}, {"prefix", nlohmann::json::array()}};
  int64_t errors = 0;

  // Warm-up: page in the weights and grow the activation buffers before anything is timed.
  run_wave(engine, {random_tokens(rng, 64, model->config().vocab_size)}, 4);
  if (!f.flag("no-matrix")) {
    std::printf("\n%-10s %5s %4s %10s %10s %10s %9s %9s %8s %8s %8s %8s %8s %6s\n", "workload", "conc", "rep",
                "out tok/s", "dec tok/s", "steady t/s", "ttft p50", "ttft p95", "s min", "s p05", "s p50", "s p95",
                "s max", "errors");
    for (const Workload& w : workloads)
      for (int64_t r = 0; r < repeats; ++r)
        for (int64_t c : levels) {
          const auto cell = run_cell(engine, w, c, static_cast<int>(r), rng);
          errors += cell["errors"].get<int64_t>();
          std::printf("%-10s %5" PRId64 " %4" PRId64 " %10.1f %10.1f %10.1f %9.3f %9.3f %8.1f %8.1f %8.1f %8.1f %8.1f %6" PRId64 "\n",
                      w.name.c_str(), c, r, cell["output_tokens_per_second"].get<double>(),
                      cell["decode_tokens_per_second"].get<double>(),
                      cell["steady_decode_tokens_per_second"].get<double>(),
                      cell["ttft_p50"].get<double>(), cell["ttft_p95"].get<double>(),
                      cell["stream_tps_min"].get<double>(), cell["stream_tps_p05"].get<double>(),
                      cell["stream_tps_p50"].get<double>(), cell["stream_tps_p95"].get<double>(),
                      cell["stream_tps_max"].get<double>(), cell["errors"].get<int64_t>());
          std::fflush(stdout);
          report["cells"].push_back(cell);
        }
    print_decode_scaling(report["cells"]);
  }
  if (!f.flag("no-prefix-table")) {
    std::printf("\n%-8s %10s %10s %8s %8s\n", "prefix", "cold ttft", "warm ttft", "speedup", "cached");
    for (int64_t len : prefix_lengths) {
      if (len + 17 > engine.context_window()) {
        std::printf("%-8" PRId64 " skipped: beyond the context window of %" PRId64 "\n", len, engine.context_window());
        continue;
      }
      const auto row = run_prefix_row(engine, len, rng);
      errors += row["errors"].get<int64_t>();
      std::printf("%-8" PRId64 " %10.3f %10.3f %7.1fx %8" PRId64 "\n", len, row["cold_ttft"].get<double>(),
                  row["warm_ttft"].get<double>(), row["speedup"].get<double>(), row["warm_cached_tokens"].get<int64_t>());
      std::fflush(stdout);
      report["prefix"].push_back(row);
    }
  }
  report["errors"] = errors;
  const std::string json_path = f.str("json", "zen-bench.json");
  std::ofstream(json_path) << report.dump(2) << "\n";
  std::printf("\nrequests lost or errored: %" PRId64 "; JSON: %s\n", errors, json_path.c_str());
  std::fputs(tensor_parallel_summary(load).c_str(), stdout);
  return errors == 0 ? 0 : 1;
}

}  // namespace zen::cli
