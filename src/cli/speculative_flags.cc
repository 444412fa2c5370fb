#include "cli/speculative_flags.h"

#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "cli/commands.h"

namespace zen::cli {

std::vector<FlagSpec> with_speculative_flags(std::vector<FlagSpec> specs) {
  specs.push_back({"speculative-config", FlagKind::String,
                   "speculative decoding as JSON (vLLM's keys): {\"method\": \"ngram|suffix|draft_model|dflash|mtp\", \"model\": PATH, "
                   "\"num_speculative_tokens\": K, \"prompt_lookup_min\": N, \"prompt_lookup_max\": N, \"adaptive\": true}",
                   {}});
  specs.push_back({"draft-model", FlagKind::String, "shortcut for --speculative-config '{\"method\": \"draft_model\", \"model\": PATH}'", {}});
  specs.push_back({"dflash", FlagKind::OptionalString,
                   "DFlash block drafting with the drafter folder PATH; bare, the model folder's dflash2/ or dflash/ "
                   "(shortcut for --speculative-config '{\"method\": \"dflash\", \"model\": PATH}')",
                   {}});
  specs.push_back({"mtp", FlagKind::Bool, "shortcut for --speculative-config '{\"method\": \"mtp\"}' (the checkpoint's MTP head)", {}});
  specs.push_back({"spec-trace", FlagKind::String, "write one JSON line per verification (step, sequence, position, drafts, accepted) to FILE", {}});
  return specs;
}

namespace {

// A model folder's bundled DFlash drafter (Zen6 ships dflash2/): dflash2/, else dflash/.
std::string bundled_drafter(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* name : {"dflash2", "dflash"})
    if (const fs::path p = fs::path(model_path) / name; fs::is_regular_file(p / "config.json", ec)) return p.string();
  fail("--dflash without a path: the model ", model_path, " carries no dflash2/ or dflash/ drafter folder; give --dflash PATH");
}

}  // namespace

void apply_speculative_flags(const Flags& f, EngineOptions& o) {
  const int given = (f.has("speculative-config") ? 1 : 0) + (f.has("draft-model") ? 1 : 0) + (f.flag("mtp") ? 1 : 0) +
                    (f.has("dflash") ? 1 : 0);
  if (given > 1) fail("give one of --speculative-config, --draft-model, --dflash and --mtp");
  if (f.has("speculative-config")) o.speculative = spec::SpeculativeConfig::parse(f.str("speculative-config"));
  if (f.has("draft-model")) {
    if (f.str("draft-model").empty()) fail("--draft-model needs a path");
    o.speculative.method = "draft_model";
    o.speculative.model = f.str("draft-model");
  }
  if (f.flag("mtp")) o.speculative.method = "mtp";
  if (f.has("dflash")) {
    o.speculative.method = "dflash";
    o.speculative.model = f.str("dflash");
  }
  if (o.speculative.method == "dflash" && o.speculative.model.empty())
    o.speculative.model = bundled_drafter(resolve_model_path(f.str("model")));
  if (o.speculative.enabled()) o.speculative.validate();
  if (f.has("spec-trace")) {
    if (!o.speculative.enabled()) fail("--spec-trace needs speculative decoding (--speculative-config, --draft-model, --dflash or --mtp)");
    o.spec_trace_path = f.str("spec-trace");
    if (o.spec_trace_path.empty()) fail("--spec-trace needs a file name");
  }
}

std::string speculation_summary(const EngineStats& s) {
  char line[256];
  std::string out;
  const double rate = s.spec_draft_tokens > 0 ? static_cast<double>(s.spec_accepted_tokens) / static_cast<double>(s.spec_draft_tokens) : 0.0;
  const double mean_len = s.spec_drafts > 0 ? 1.0 + static_cast<double>(s.spec_accepted_tokens) / static_cast<double>(s.spec_drafts) : 0.0;
  std::snprintf(line, sizeof line,
                "speculation: %lld drafts, %lld draft tokens, %lld accepted (%.1f%%), mean accepted length %.2f (tokens per verification, bonus included)\n",
                static_cast<long long>(s.spec_drafts), static_cast<long long>(s.spec_draft_tokens),
                static_cast<long long>(s.spec_accepted_tokens), 100.0 * rate, mean_len);
  out += line;
  if (s.spec_drafts > 0) {
    out += "acceptance by position:";
    for (size_t p = 0; p < s.spec_accepted_per_pos.size() && s.spec_accepted_per_pos[p] > 0; ++p) {
      std::snprintf(line, sizeof line, " %zu:%.2f", p + 1,
                    static_cast<double>(s.spec_accepted_per_pos[p]) / static_cast<double>(s.spec_drafts));
      out += line;
    }
    out += " (accepted at position i / drafts)\n";
  }
  if (!s.spec_time_by_part.empty()) {
    out += "proposer time:";
    for (const auto& [part, value] : s.spec_time_by_part) {
      std::snprintf(line, sizeof line, part == "blocks" || part == "calls" ? " %s %.0f" : " %s %.3f s", part.c_str(), value);
      out += line;
    }
    out += "\n";
  }
  return out;
}

}  // namespace zen::cli
