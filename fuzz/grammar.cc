// Fuzz target: grammars from requests (response_format / guided_* / grammar fields). The first
// byte picks the front end (JSON Schema strict or not, regex, GBNF, choice list, tool calls),
// the rest is its text; what compiles is walked byte by byte through a matcher over a
// one-byte-per-token vocabulary and checked against the reference simulation.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "grammar/compile.h"

namespace {

const std::shared_ptr<const zen::grammar::Vocabulary>& byte_vocab() {
  static const auto vocab = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    bytes.push_back("{\"");
    bytes.push_back("\": ");
    bytes.push_back("");  // the stop token
    return std::make_shared<const zen::grammar::Vocabulary>(std::move(bytes), std::vector<int32_t>{258});
  }();
  return vocab;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using zen::grammar::GrammarSpec;
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  GrammarSpec spec;
  spec.text = text;
  switch (pick % 7) {
    case 0: spec.kind = GrammarSpec::Kind::JsonSchema; break;
    case 1: spec.kind = GrammarSpec::Kind::JsonSchema; spec.json.strict = false; break;
    case 2: spec.kind = GrammarSpec::Kind::Regex; break;
    case 3: spec.kind = GrammarSpec::Kind::Gbnf; break;
    case 4:
      spec.kind = GrammarSpec::Kind::Choice;
      for (size_t at = 0; at <= text.size();) {
        const size_t nl = std::min(text.find('\n', at), text.size());
        spec.choices.push_back(text.substr(at, nl - at));
        at = nl + 1;
      }
      break;
    case 5:
      spec.kind = GrammarSpec::Kind::ToolCalls;
      try {
        spec.tools.tools = nlohmann::ordered_json::parse(text);
      } catch (const nlohmann::json::exception&) {
        return 0;
      }
      spec.tools.mode = static_cast<zen::grammar::ToolGrammarSpec::Mode>((pick / 7) % 3);
      break;
    default: spec.kind = GrammarSpec::Kind::JsonObject; spec.json.any_whitespace = pick & 0x80; break;
  }
  spec.reasoning = static_cast<GrammarSpec::Reasoning>((pick >> 4) % 3);
  zen::grammar::CompileLimits limits;
  limits.max_seconds = 2.0;
  limits.grammar.max_nfa_states = 200'000;
  std::shared_ptr<const zen::grammar::Grammar> g;
  try {
    g = zen::grammar::build_grammar(spec, limits);
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
    return 0;
  } catch (const zen::grammar::SchemaError&) {
    return 0;
  }
  // Walk the input's own bytes: each step's mask must agree with the reference simulation.
  zen::grammar::Matcher m(std::make_shared<const zen::grammar::CompiledGrammar>(g, byte_vocab()));
  std::vector<uint64_t> mask(5);
  std::string consumed;
  for (size_t i = 0; i < text.size() && i < 64; ++i) {
    m.fill_mask(mask);
    const auto b = static_cast<uint8_t>(text[i]);
    const bool allowed = (mask[b >> 6] >> (b & 63)) & 1;
    const std::string next = consumed + text[i];
    if (allowed != (zen::grammar::viable_prefix(*g, next) == next.size())) __builtin_trap();
    if (!allowed) break;
    if (!m.advance(b)) __builtin_trap();
    consumed = next;
  }
  if (m.accepting() != zen::grammar::accepts(*g, consumed)) __builtin_trap();
  return 0;
}
