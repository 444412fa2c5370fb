// zen plan: lays a model out over N nodes (TP / EP / PP, src/plan/plan.h) and prints per-rank
// memory, the collectives of a decode step and the batch-1 decode bound of each layout.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "io/gguf.h"
#include "model/config.h"
#include "plan/plan.h"

namespace zen::cli {
namespace {

namespace fs = std::filesystem;
using plan::LayoutPlan;

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr int64_t kNoKv = std::numeric_limits<int64_t>::max();

const char* kModelHelp =
    "\nCost model (batch-1 decode, per token; details in src/plan/plan.h and the README):\n"
    "  weights per rank = its parameters x dtype bytes (1-D tensors f32); usable memory = memory\n"
    "  per node x (1 - reserve); KV capacity = (usable - weights - recurrent states) / KV bytes\n"
    "  per token per rank. memory time = sum over pipeline stages of the largest per-rank weight\n"
    "  bytes read per token / memory bandwidth (MoE: top-k experts; EP: k/e per rank expected).\n"
    "  network time = sum over collectives: ring all-reduce 2(n-1)(alpha + B/n/beta), all-gather\n"
    "  (n-1)(alpha + b/beta), all-to-all (n-1) alpha + S/beta, send alpha + B/beta; alpha =\n"
    "  --latency-us, beta = --network Gbit/s / 8. tokens/s bound = 1 / (memory + network time).\n"
    "  TP: 2 all-reduces of [tokens, H] per layer + 1 for the vocab-split embedding + 1 all-gather\n"
    "  of (max, index) per token for greedy rows (--logits: of the f32 logits slices). EP: per MoE layer one all-reduce, or all-to-all dispatch\n"
    "  + combine (the cheaper at batch 1 is used, both shown with --layout). PP: one send of\n"
    "  [tokens, H] per stage boundary + (max, index) per token back to the first stage (--logits:\n"
    "  the f32 logits), where the sampler runs.\n";

bool is_gguf(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

// An HF config.json (or its folder), or a GGUF file (its metadata; the tensors are not read).
ModelConfig load_config(const std::string& path) {
  fs::path file = path;
  std::error_code ec;
  if (fs::is_directory(file, ec)) file /= "config.json";
  if (!fs::is_regular_file(file, ec))
    fail("--model: ", file.string(), ": no such file (give a config.json, a folder holding one, or a GGUF file)");
  if (is_gguf(file)) return ModelConfig::from_gguf(GgufFile(file.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(file.string()));
  } catch (const nlohmann::json::exception& e) {
    fail(file.string(), ": invalid JSON: ", e.what());
  }
  return ModelConfig::from_hf(j);
}

std::string billions(int64_t n) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f B", static_cast<double>(n) / 1e9);
  return buf;
}

std::string kv_tokens_text(int64_t t) {
  if (t == kNoKv) return "-";
  char buf[32];
  if (t >= 10'000'000) std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(t) / 1e6);
  else std::snprintf(buf, sizeof buf, "%" PRId64, t);
  return buf;
}

void print_header(const std::string& path, const ModelConfig& c, const plan::Options& o, const plan::ModelSummary& s) {
  std::printf("model: %s (%s)\n", path.c_str(), c.architecture.c_str());
  std::printf("parameters: %" PRId64 " (%s)", s.parameters, billions(s.parameters).c_str());
  if (s.active_parameters != s.parameters)
    std::printf(", active per token %" PRId64 " (%s)", s.active_parameters, billions(s.active_parameters).c_str());
  std::printf("\n");
  std::printf("layers: %" PRId64 " (%" PRId64 " attention", c.num_layers, s.kv_layers);
  if (s.linear_layers > 0) std::printf(", %" PRId64 " Gated DeltaNet", s.linear_layers);
  if (s.moe_layers > 0)
    std::printf(", %" PRId64 " MoE: %" PRId64 " experts top-%" PRId64, s.moe_layers, c.num_experts, c.num_experts_per_tok);
  std::printf("), hidden %" PRId64 ", heads %" PRId64 " (kv %" PRId64 ", dim %" PRId64 "), vocab %" PRId64 "\n",
              c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.vocab_size);
  std::printf("weights at %s: %.1f GiB (%.3f bytes per parameter, 1-D tensors f32); read per token on one rank: %.1f GiB\n",
              o.dtype.c_str(), s.weight_bytes / kGiB, plan::dtype_bytes(o.dtype), s.active_weight_bytes / kGiB);
  std::printf("KV cache: %" PRId64 " bytes per token (%s, %" PRId64 " attention layers)", s.kv_bytes_per_token,
              kv_dtype_name(o.kv_dtype), s.kv_layers);
  if (s.state_bytes_per_sequence > 0)
    std::printf("; recurrent state %.1f MiB per sequence (f32, %" PRId64 " reserved per rank)",
                static_cast<double>(s.state_bytes_per_sequence) / (1 << 20), o.sequences);
  std::printf("\n");
  std::printf("cluster: %" PRId64 " node%s x %.1f GiB (%.1f GiB usable, %.0f%% reserve), one rank per node; network %g Gbit/s, "
              "latency %g us; memory bandwidth %g GB/s per rank\n",
              o.nodes, o.nodes == 1 ? "" : "s", o.memory_per_node / kGiB, o.memory_per_node * (1 - o.reserve) / kGiB,
              o.reserve * 100, o.network_gbps, o.latency_us, o.memory_bandwidth_gbs);
  std::printf("fits: weights + states + at least %" PRId64 " tokens of KV per rank. Decode bound at batch 1 = 1 / (memory "
              "time + network time), no overlap.\n",
              o.min_kv_tokens);
}

void print_table(const std::vector<LayoutPlan>& plans) {
  std::printf("\n%-12s %9s %9s %11s %5s %7s %9s %8s %8s %8s\n", "layout", "weights", "KV/token", "KV tokens", "fits",
              "calls", "wire", "mem", "net", "tok/s");
  std::printf("%-12s %9s %9s %11s %5s %7s %9s %8s %8s %8s\n", "", "GiB/rank", "KiB/rank", "per rank", "", "/token",
              "KiB/token", "ms", "ms", "bound");
  for (const LayoutPlan& p : plans) {
    if (!p.valid) continue;
    std::printf("%-12s %9.1f %9.1f %11s %5s %7" PRId64 " %9.1f %8.2f %8.2f %8.1f\n", p.layout.name().c_str(),
                p.weight_bytes / kGiB, static_cast<double>(p.kv_bytes_per_token) / 1024, kv_tokens_text(p.kv_tokens).c_str(),
                p.fits ? "yes" : "no", p.calls_per_token, p.wire_bytes_per_token / 1024, p.memory_seconds * 1e3,
                p.network_seconds * 1e3, p.tokens_per_second);
  }
  bool any = false;
  for (const LayoutPlan& p : plans) {
    if (p.valid && p.fits) continue;
    if (!any) std::printf("\n");
    any = true;
    if (!p.valid) std::printf("not possible: %s: %s\n", p.layout.name().c_str(), p.problem.c_str());
    else std::printf("does not fit: %s: %s\n", p.layout.name().c_str(), p.fit_problem.c_str());
  }
  for (const LayoutPlan& p : plans) {
    if (p.valid && p.layout.ep > 1) {
      std::printf("\nEP layouts use the MoE exchange cheaper at batch 1 (--layout ep=... compares both).\n");
      break;
    }
  }
}

void print_collectives(const std::vector<plan::CollectiveCall>& calls) {
  std::printf("  %-10s %-48s %5s %5s %5s %11s %11s %9s %9s\n", "kind", "purpose", "stage", "group", "calls", "bytes/call",
              "wire/call", "us/call", "ms/token");
  for (const plan::CollectiveCall& c : calls)
    std::printf("  %-10s %-48s %5" PRId64 " %5" PRId64 " %5" PRId64 " %11.0f %11.0f %9.1f %9.3f\n",
                plan::collective_name(c.kind), c.purpose.c_str(), c.stage, c.group, c.calls, c.payload_bytes, c.wire_bytes,
                c.seconds * 1e6, static_cast<double>(c.calls) * c.seconds * 1e3);
  for (const plan::KindTotals& t : plan::totals_by_kind(calls))
    std::printf("  %-10s total: %" PRId64 " calls, %.1f KiB on the wire per rank, %.3f ms\n", plan::collective_name(t.kind),
                t.calls, t.wire_bytes / 1024, t.seconds * 1e3);
  std::printf("  all kinds: %" PRId64 " calls, %.1f KiB, %.3f ms per token\n", plan::total_calls(calls),
              plan::total_wire_bytes(calls) / 1024, plan::total_seconds(calls) * 1e3);
}

void print_detail(const ModelConfig& c, const LayoutPlan& p) {
  const plan::Layout& L = p.layout;
  std::printf("\nlayout %s: %" PRId64 " ranks (tp %" PRId64 " x ep %" PRId64 " x pp %" PRId64 "), KV heads per rank: %" PRId64
              "\n",
              L.name().c_str(), L.ranks(), L.tp, L.ep, L.pp, p.kv_heads_per_rank);
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const plan::StagePlan& st = p.stages[s];
    std::printf("stage %zu: layers [%" PRId64 ", %" PRId64 "): %" PRId64 " attention", s, st.first_layer,
                st.first_layer + st.layers, st.kv_layers);
    if (st.linear_layers > 0) std::printf(", %" PRId64 " Gated DeltaNet", st.linear_layers);
    if (c.num_experts > 0) std::printf(", %" PRId64 " MoE, %" PRId64 " dense MLP", st.moe_layers, st.dense_layers);
    std::printf("%s%s\n", st.embedding ? ", embedding" : "", st.lm_head ? ", lm_head" : "");
    std::printf("  per rank: %s parameters, weights %.2f GiB, read per token %.2f GiB", billions(st.parameters).c_str(),
                st.weight_bytes / kGiB, st.read_bytes / kGiB);
    if (L.ep > 1) std::printf(" (worst case %.2f GiB)", st.read_bytes_worst / kGiB);
    std::printf("\n  KV %" PRId64 " bytes per token", st.kv_bytes_per_token);
    if (st.state_bytes_per_sequence > 0)
      std::printf(", recurrent state %.1f MiB per sequence", static_cast<double>(st.state_bytes_per_sequence) / (1 << 20));
    std::printf(", free %.2f GiB -> KV tokens %s; memory %.3f ms, network %.3f ms per token\n", st.free_bytes / kGiB,
                kv_tokens_text(st.kv_tokens).c_str(), st.memory_seconds * 1e3, st.network_seconds * 1e3);
  }
  std::printf("fits: %s%s%s\n", p.fits ? "yes" : "no", p.fits ? "" : ": ", p.fit_problem.c_str());
  std::printf("KV capacity: %s tokens per rank, %s in the layout\n", kv_tokens_text(p.kv_tokens).c_str(),
              kv_tokens_text(p.kv_tokens_total).c_str());
  std::printf("collectives per decode step at batch 1 (= per token)%s:\n",
              L.ep > 1 ? (std::string(", MoE by ") + plan::moe_comm_name(p.moe)).c_str() : "");
  print_collectives(p.collectives);
  if (L.ep > 1) {
    const plan::MoeComm alt = p.moe == plan::MoeComm::AllToAll ? plan::MoeComm::AllReduce : plan::MoeComm::AllToAll;
    std::printf("the other MoE exchange, by %s:\n", plan::moe_comm_name(alt));
    print_collectives(p.collectives_alt);
    const plan::EpComparison& e = p.ep;
    auto cheaper = [](double all_reduce, double all_to_all) {
      if (std::abs(all_reduce - all_to_all) <= 1e-9 * std::max(all_reduce, all_to_all)) return "tie";
      return all_reduce < all_to_all ? "all-reduce" : "all-to-all";
    };
    std::printf("MoE exchange, network time per step: batch 1: all-reduce %.3f ms, all-to-all %.3f ms -> %s; batch %" PRId64
                ": all-reduce %.3f ms, all-to-all %.3f ms -> %s\n",
                e.all_reduce_batch1 * 1e3, e.all_to_all_batch1 * 1e3,
                cheaper(e.all_reduce_batch1, e.all_to_all_batch1), e.large_batch,
                e.all_reduce_large * 1e3, e.all_to_all_large * 1e3,
                cheaper(e.all_reduce_large, e.all_to_all_large));
    std::printf("  (same 2(e-1) latency steps per MoE layer; bytes per rank: all-reduce 2(e-1)/e x tokens rows, all-to-all "
                "2k(e-1)/e x tokens/e rows, so all-to-all wins on bytes only when k < e; k = %" PRId64 ", e = %" PRId64
                ")\n",
                c.num_experts_per_tok, L.ep);
  }
  std::printf("decode bound at batch 1: memory %.3f ms", p.memory_seconds * 1e3);
  if (L.ep > 1) std::printf(" (worst case %.3f ms)", p.memory_seconds_worst * 1e3);
  std::printf(" + network %.3f ms = %.3f ms per token -> %.1f tokens/s\n", p.network_seconds * 1e3,
              (p.memory_seconds + p.network_seconds) * 1e3, p.tokens_per_second);
  if (L.pp > 1) std::printf("pipelined (>= %" PRId64 " sequences in flight): %.1f tokens/s aggregate\n", L.pp,
                            p.pipelined_tokens_per_second);
  for (const std::string& n : p.notes) std::printf("note: %s\n", n.c_str());
}

nlohmann::json calls_json(const std::vector<plan::CollectiveCall>& calls) {
  nlohmann::json a = nlohmann::json::array();
  for (const plan::CollectiveCall& c : calls)
    a.push_back({{"kind", plan::collective_name(c.kind)}, {"purpose", c.purpose}, {"stage", c.stage}, {"group", c.group},
                 {"calls", c.calls}, {"calls_per_layer", c.calls_per_layer}, {"payload_bytes", c.payload_bytes},
                 {"wire_bytes", c.wire_bytes}, {"seconds", c.seconds}});
  return a;
}

nlohmann::json plan_json(const LayoutPlan& p) {
  auto tokens = [](int64_t t) { return t == kNoKv ? nlohmann::json(nullptr) : nlohmann::json(t); };
  nlohmann::json j = {{"layout", p.layout.name()}, {"tp", p.layout.tp}, {"ep", p.layout.ep}, {"pp", p.layout.pp},
                      {"valid", p.valid}};
  if (!p.valid) {
    j["problem"] = p.problem;
    return j;
  }
  j["fits"] = p.fits;
  if (!p.fits) j["fit_problem"] = p.fit_problem;
  j["kv_heads_per_rank"] = p.kv_heads_per_rank;
  j["kv_replication"] = p.kv_replication;
  j["weight_bytes_per_rank"] = p.weight_bytes;
  j["kv_bytes_per_token_per_rank"] = p.kv_bytes_per_token;
  j["kv_tokens_per_rank"] = tokens(p.kv_tokens);
  j["kv_tokens_total"] = tokens(p.kv_tokens_total);
  j["calls_per_token"] = p.calls_per_token;
  j["wire_bytes_per_token"] = p.wire_bytes_per_token;
  j["memory_seconds"] = p.memory_seconds;
  j["memory_seconds_worst"] = p.memory_seconds_worst;
  j["network_seconds"] = p.network_seconds;
  j["tokens_per_second"] = p.tokens_per_second;
  if (p.layout.pp > 1) j["pipelined_tokens_per_second"] = p.pipelined_tokens_per_second;
  nlohmann::json stages = nlohmann::json::array();
  for (const plan::StagePlan& s : p.stages)
    stages.push_back({{"first_layer", s.first_layer}, {"layers", s.layers}, {"kv_layers", s.kv_layers},
                      {"linear_layers", s.linear_layers}, {"moe_layers", s.moe_layers}, {"dense_layers", s.dense_layers},
                      {"embedding", s.embedding}, {"lm_head", s.lm_head}, {"parameters_per_rank", s.parameters},
                      {"weight_bytes_per_rank", s.weight_bytes}, {"read_bytes_per_token", s.read_bytes},
                      {"read_bytes_per_token_worst", s.read_bytes_worst}, {"kv_bytes_per_token", s.kv_bytes_per_token},
                      {"state_bytes_per_sequence", s.state_bytes_per_sequence}, {"free_bytes", s.free_bytes},
                      {"kv_tokens", tokens(s.kv_tokens)}, {"memory_seconds", s.memory_seconds},
                      {"network_seconds", s.network_seconds}});
  j["stages"] = stages;
  j["collectives"] = calls_json(p.collectives);
  if (p.layout.ep > 1) {
    j["moe_comm"] = plan::moe_comm_name(p.moe);
    j["collectives_alt"] = calls_json(p.collectives_alt);
    j["ep_comparison"] = {{"all_to_all_batch1_seconds", p.ep.all_to_all_batch1},
                          {"all_reduce_batch1_seconds", p.ep.all_reduce_batch1},
                          {"all_to_all_large_seconds", p.ep.all_to_all_large},
                          {"all_reduce_large_seconds", p.ep.all_reduce_large},
                          {"large_batch", p.ep.large_batch}};
  }
  j["notes"] = p.notes;
  return j;
}

}  // namespace

int plan_command(int argc, char** argv) {
  Flags f("plan", {{"model", FlagKind::String, "config.json, or a folder holding one (HF layout; no weights needed), or a GGUF file (its metadata)", {}},
                   {"nodes", FlagKind::Int, "N nodes, one rank each", {}},
                   {"memory-per-node", FlagKind::String, "memory per node, e.g. 256G or 1.5T (binary units)", {}},
                   {"network", FlagKind::Float, "network bandwidth per node, Gbit/s", {}},
                   {"dtype", FlagKind::Choice, "weight dtype (default bf16; nvfp4 and q4_k 4.5 bits, q8_0 8.5 bits)",
                    {"bf16", "f16", "fp8", "nvfp4", "q4_k", "q8_0", "f32"}},
                   {"kv-dtype", FlagKind::Choice, "KV cache dtype (default bf16)", {"bf16", "fp8", "f32"}},
                   {"latency-us", FlagKind::Float, "per-message latency alpha in us (default 20: TCP over Ethernet)", {}},
                   {"memory-bandwidth", FlagKind::Float, "weight-read bandwidth per rank, GB/s (default 200)", {}},
                   {"reserve", FlagKind::Float, "fraction of each node's memory kept free (default 0.10)", {}},
                   {"min-kv-tokens", FlagKind::Int, "KV room per rank a layout needs to fit (default 4096)", {}},
                   {"logits", FlagKind::Bool,
                    "rows sample or return logprobs: exchange f32 logits (default: greedy, (max, index) per token)", {}},
                   {"sequences", FlagKind::Int, "recurrent states reserved per rank, hybrids (default 1)", {}},
                   {"batch", FlagKind::Int, "the larger batch of the EP all-to-all vs all-reduce comparison (default 64)", {}},
                   {"layout", FlagKind::String, "print only this layout, in detail: tp=8, tp=4,pp=2, ep=8, pp=8 ...", {}},
                   {"json", FlagKind::String, "also write the plan as JSON to FILE ('-': stdout, instead of the table)", {}},
                   {"help", FlagKind::Bool, "show this help", {}}});
  f.parse(argc, argv, 2);
  if (f.flag("help")) {
    std::fputs(f.usage().c_str(), stdout);
    std::fputs(kModelHelp, stdout);
    return 0;
  }
  if (!f.positional().empty()) fail("unexpected argument '", f.positional()[0], "' (zen plan takes flags only)");
  for (const char* required : {"model", "nodes", "memory-per-node", "network"})
    if (!f.has(required))
      fail("give --", required, ": zen plan --model CONFIG --nodes N --memory-per-node BYTES --network GBPS");
  plan::Options o;
  o.nodes = f.integer("nodes", 0);
  o.memory_per_node = static_cast<double>(parse_byte_size("memory-per-node", f.str("memory-per-node")));
  o.network_gbps = f.number("network", 0);
  o.dtype = f.str("dtype", "bf16");
  o.kv_dtype = parse_kv_cache_quant(f.str("kv-dtype", "bf16"));
  o.latency_us = f.number("latency-us", o.latency_us);
  o.memory_bandwidth_gbs = f.number("memory-bandwidth", o.memory_bandwidth_gbs);
  o.reserve = f.number("reserve", o.reserve);
  o.min_kv_tokens = f.integer("min-kv-tokens", o.min_kv_tokens);
  o.greedy = !f.flag("logits");
  o.sequences = f.integer("sequences", o.sequences);
  o.large_batch = f.integer("batch", o.large_batch);
  o.validate();
  const plan::Layout only = f.has("layout") ? plan::parse_layout(f.str("layout")) : plan::Layout{};
  const std::string model_path = f.str("model");
  const ModelConfig cfg = load_config(model_path);
  const plan::ModelSummary summary = plan::summarize(cfg, o);
  const bool json_stdout = f.str("json") == "-";

  std::vector<LayoutPlan> plans;
  if (f.has("layout")) plans.push_back(plan::plan_layout(cfg, o, only));
  else plans = plan::plan_all(cfg, o);

  if (!json_stdout) {
    print_header(model_path, cfg, o, summary);
    if (f.has("layout")) print_detail(cfg, plans.front());
    else print_table(plans);
  }
  if (f.has("json")) {
    nlohmann::json j;
    j["model"] = {{"path", model_path},
                  {"architecture", cfg.architecture},
                  {"parameters", summary.parameters},
                  {"active_parameters", summary.active_parameters},
                  {"weight_bytes", summary.weight_bytes},
                  {"active_weight_bytes", summary.active_weight_bytes},
                  {"kv_bytes_per_token", summary.kv_bytes_per_token},
                  {"state_bytes_per_sequence", summary.state_bytes_per_sequence},
                  {"layers", cfg.num_layers},
                  {"kv_layers", summary.kv_layers},
                  {"linear_layers", summary.linear_layers},
                  {"moe_layers", summary.moe_layers},
                  {"hidden_size", cfg.hidden_size}};
    j["options"] = {{"nodes", o.nodes},
                    {"memory_per_node", o.memory_per_node},
                    {"network_gbps", o.network_gbps},
                    {"latency_us", o.latency_us},
                    {"memory_bandwidth_gbs", o.memory_bandwidth_gbs},
                    {"dtype", o.dtype},
                    {"dtype_bytes", plan::dtype_bytes(o.dtype)},
                    {"kv_dtype", kv_dtype_name(o.kv_dtype)},
                    {"wire_bytes", o.wire_bytes},
                    {"reserve", o.reserve},
                    {"min_kv_tokens", o.min_kv_tokens},
                    {"sequences", o.sequences},
                    {"large_batch", o.large_batch}};
    nlohmann::json layouts = nlohmann::json::array();
    for (const LayoutPlan& p : plans) layouts.push_back(plan_json(p));
    j["layouts"] = layouts;
    const std::string text = j.dump(1) + "\n";
    if (json_stdout) {
      std::fputs(text.c_str(), stdout);
    } else {
      std::ofstream out(f.str("json"), std::ios::binary);
      out << text;
      if (!out.good()) fail("could not write ", f.str("json"));
    }
  }
  if (f.has("layout") && !plans.front().fits) {
    std::fflush(stdout);
    std::fprintf(stderr, "zen plan: layout %s does not fit: %s\n", only.name().c_str(), plans.front().fit_problem.c_str());
    return 1;
  }
  return 0;
}

}  // namespace zen::cli
