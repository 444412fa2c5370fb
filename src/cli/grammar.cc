// zen grammar: compile a grammar against a tokenizer's vocabulary, time it, and check texts
// token by token the way constrained decoding walks them (tests and benchmarks use it).
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "grammar/compile.h"
#include "tokenizer/tokenizer.h"

namespace zen::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

grammar::GrammarSpec spec_from_flags(const Flags& f) {
  grammar::GrammarSpec spec;
  int given = 0;
  if (f.has("json-schema")) {
    spec.kind = grammar::GrammarSpec::Kind::JsonSchema;
    spec.text = read_text_file(f.str("json-schema"));
    ++given;
  }
  if (f.has("regex")) {
    spec.kind = grammar::GrammarSpec::Kind::Regex;
    spec.text = f.str("regex");
    ++given;
  }
  if (f.has("gbnf")) {
    spec.kind = grammar::GrammarSpec::Kind::Gbnf;
    spec.text = read_text_file(f.str("gbnf"));
    ++given;
  }
  if (f.flag("json")) {
    spec.kind = grammar::GrammarSpec::Kind::JsonObject;
    ++given;
  }
  if (given != 1) fail("give exactly one of --json-schema FILE, --regex R, --gbnf FILE, --json");
  spec.json.strict = !f.flag("no-strict");
  spec.json.any_whitespace = f.flag("any-whitespace");
  return spec;
}

struct CheckResult {
  bool accepted = true;
  size_t bad_token = 0, bad_byte = 0;
};

// Walks the text's tokens through a matcher, timing each mask (including the last one,
// where only a stop token may follow).
CheckResult check_text(const std::shared_ptr<const grammar::CompiledGrammar>& cg, const Tokenizer& tok,
                       const std::string& text, std::vector<double>& mask_us) {
  grammar::Matcher m(cg);
  const std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/false, /*add_bos=*/false);
  std::vector<uint64_t> mask(static_cast<size_t>(cg->vocab().size() + 63) / 64);
  size_t byte = 0;
  for (size_t i = 0; i <= ids.size(); ++i) {
    const auto t0 = Clock::now();
    m.fill_mask(mask);
    mask_us.push_back(ms_since(t0) * 1000.0);
    if (i == ids.size()) break;
    const int32_t id = ids[i];
    const bool allowed = (mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
    if (!allowed || !m.advance(id)) {
      const std::string prefix = text.substr(0, byte) + tok.token_bytes(id);
      return {false, i, std::min(grammar::viable_prefix(cg->grammar(), prefix), prefix.size())};
    }
    byte += tok.token_bytes(id).size();
  }
  if (!m.accepting()) return {false, ids.size(), text.size()};
  return {};
}

struct Stats {
  std::vector<double> values;
  void add(double v) { values.push_back(v); }
  std::string summary(const char* unit) {
    if (values.empty()) return "none";
    std::sort(values.begin(), values.end());
    double sum = 0;
    for (double v : values) sum += v;
    auto pct = [&](double p) { return values[std::min(values.size() - 1, static_cast<size_t>(p * static_cast<double>(values.size())))]; };
    char buf[200];
    std::snprintf(buf, sizeof buf, "%zu, avg %.1f %s, p50 %.1f %s, p99 %.1f %s, max %.1f %s", values.size(),
                  sum / static_cast<double>(values.size()), unit, pct(0.5), unit, pct(0.99), unit, values.back(), unit);
    return buf;
  }
};

// --batch FILE: one JSON object per line, {"schema": {...}, "texts": ["...", ...]}, all in this
// process (one vocabulary, token classes shared between schemas as in a server).
int run_batch(const std::string& path, const Tokenizer& tok, const std::shared_ptr<const grammar::Vocabulary>& vocab,
              bool strict) {
  std::istringstream lines(read_text_file(path));
  std::string line;
  Stats compile_ms;
  std::vector<double> mask_us;
  int schemas = 0, refused = 0, texts = 0, rejected = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::ordered_json::parse(line);
    grammar::GrammarSpec spec;
    spec.kind = grammar::GrammarSpec::Kind::JsonSchema;
    spec.text = j.at("schema").dump();
    spec.json.strict = strict;
    ++schemas;
    const auto t0 = Clock::now();
    std::shared_ptr<const grammar::CompiledGrammar> cg;
    try {
      cg = std::make_shared<grammar::CompiledGrammar>(grammar::build_grammar(spec), vocab);
    } catch (const std::exception&) {
      ++refused;
      continue;
    }
    compile_ms.add(ms_since(t0));
    const size_t before = mask_us.size();
    for (const auto& t : j.at("texts")) {
      ++texts;
      rejected += !check_text(cg, tok, t.get<std::string>(), mask_us).accepted;
    }
    const double worst = before < mask_us.size() ? *std::max_element(mask_us.begin() + static_cast<ptrdiff_t>(before), mask_us.end()) : 0;
    if (worst > 50'000)  // say which schemas hold the tail
      std::fprintf(stderr, "slow mask: %s: %.1f ms\n", j.value("name", "line " + std::to_string(schemas)).c_str(), worst / 1000);
  }
  Stats masks{mask_us};
  std::printf("schemas: %d (%d refused), texts: %d (%d rejected)\n", schemas, refused, texts, rejected);
  std::printf("compile: %s\n", compile_ms.summary("ms").c_str());
  std::printf("masks: %s\n", masks.summary("us").c_str());
  return rejected == 0 ? 0 : 1;
}

}  // namespace

int grammar_command(int argc, char** argv) {
  Flags f("grammar", {{"tokenizer", FlagKind::String, "tokenizer.json, a model folder, or a .gguf (default: the default model)", {}},
                      {"json-schema", FlagKind::String, "a JSON Schema file", {}},
                      {"regex", FlagKind::String, "a regular expression the whole output matches", {}},
                      {"gbnf", FlagKind::String, "a llama.cpp GBNF grammar file (root rule: root)", {}},
                      {"json", FlagKind::Bool, "any JSON object (response_format json_object)", {}},
                      {"no-strict", FlagKind::Bool, "ignore JSON Schema keywords that cannot be enforced", {}},
                      {"any-whitespace", FlagKind::Bool, "allow JSON whitespace between tokens", {}},
                      {"precompute", FlagKind::Bool, "classify every state's tokens at compile time", {}},
                      {"check", FlagKind::Bool, "walk the files given after the flags token by token", {}},
                      {"batch", FlagKind::String, "JSON lines {\"schema\", \"texts\"}: compile and walk all in one process", {}},
                      kHelpFlag});
  f.parse(argc, argv, 2);
  if (wants_help(f)) return 0;
  if (!f.positional().empty() && !f.flag("check")) fail("text files are only read with --check");
  auto tok = Tokenizer::load(resolve_model_path(f.str("tokenizer")));
  auto vocab = grammar::Vocabulary::from_tokenizer(*tok);
  if (f.has("batch")) return run_batch(f.str("batch"), *tok, vocab, !f.flag("no-strict"));
  const grammar::GrammarSpec spec = spec_from_flags(f);

  const auto t0 = Clock::now();
  std::shared_ptr<const grammar::CompiledGrammar> cg;
  try {
    cg = std::make_shared<grammar::CompiledGrammar>(grammar::build_grammar(spec), vocab);
    if (f.flag("precompute")) cg->precompute();
  } catch (const grammar::SchemaError& e) {
    std::printf("compile failed: %s%s%s%s\n", e.what(), e.keyword.empty() ? "" : " (keyword ", e.keyword.c_str(),
                e.keyword.empty() ? "" : ")");
    return 2;
  } catch (const Error& e) {
    std::printf("compile failed: %s\n", e.what());
    return 2;
  }
  std::printf("compile: %.2f ms (%d states)\n", ms_since(t0), cg->grammar().num_states());
  if (!f.flag("check")) return 0;

  std::vector<double> mask_us;
  bool all = true;
  for (const std::string& path : f.positional()) {
    const CheckResult r = check_text(cg, *tok, read_text_file(path), mask_us);
    all = all && r.accepted;
    if (r.accepted) {
      std::printf("%s: accepted\n", path.c_str());
    } else {
      std::printf("%s: rejected at token %zu (byte %zu)\n", path.c_str(), r.bad_token, r.bad_byte);
    }
  }
  if (!mask_us.empty()) std::printf("masks: %s\n", Stats{mask_us}.summary("us").c_str());
  return all ? 0 : 1;
}

}  // namespace zen::cli
