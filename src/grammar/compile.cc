#include "grammar/compile.h"

#include "base/error.h"
#include "grammar/gbnf.h"
#include "grammar/regex.h"

namespace zen::grammar {

std::string GrammarSpec::key() const {
  std::string k = std::to_string(static_cast<int>(kind)) + (json.strict ? "s" : "n") + (json.any_whitespace ? "w" : "c") +
                  std::to_string(json.max_whitespace) + "|" + text;
  for (const auto& c : choices) k += "|" + std::to_string(c.size()) + ":" + c;
  if (kind == Kind::ToolCalls)
    k += "|tools:" + std::to_string(static_cast<int>(tools.format)) + std::to_string(static_cast<int>(tools.mode)) + ":" +
         tools.name + ":" + tools.tools.dump();
  return k + "|r" + std::to_string(static_cast<int>(reasoning));
}

std::shared_ptr<const Grammar> build_grammar(const GrammarSpec& spec, const CompileLimits& limits) {
  GrammarLimits gl = limits.grammar;
  gl.deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(limits.max_seconds));
  GrammarBuilder b(gl);
  int32_t root = -1;
  switch (spec.kind) {
    case GrammarSpec::Kind::JsonSchema: {
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(spec.text);
      } catch (const nlohmann::json::exception& e) {
        throw SchemaError("", "", std::string("the schema is not valid JSON: ") + e.what());
      }
      root = json_schema_rules(b, schema, spec.json);
      break;
    }
    case GrammarSpec::Kind::JsonObject: root = json_object_rules(b, spec.json); break;
    case GrammarSpec::Kind::JsonValue: root = json_value_rules(b, spec.json); break;
    case GrammarSpec::Kind::Regex:
      root = b.add_rule("root");
      b.set_body(root, parse_regex(b, spec.text));
      break;
    case GrammarSpec::Kind::Gbnf: root = parse_gbnf(b, spec.text); break;
    case GrammarSpec::Kind::ToolCalls: root = tool_call_rules(b, spec.tools); break;
    case GrammarSpec::Kind::Choice: {
      if (spec.choices.empty()) fail("a choice list needs at least one choice");
      std::vector<ExprId> alts;
      for (const auto& c : spec.choices) alts.push_back(b.literal(c));
      root = b.add_rule("root");
      b.set_body(root, b.alt(std::move(alts)));
      break;
    }
  }
  if (spec.reasoning != GrammarSpec::Reasoning::None) {
    const ExprId ws = b.repeat(b.bytes(ByteSet::of(' ') | ByteSet::of('\n')), 0, 4);
    const ExprId thought = b.seq({b.until("</think>"), ws});
    const int32_t outer = b.add_rule("reasoning");
    b.set_body(outer, b.seq({spec.reasoning == GrammarSpec::Reasoning::Open ? thought : b.opt(b.seq({b.literal("<think>"), thought})),
                             b.ref(root)}));
    root = outer;
  }
  return b.build(root);
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const GrammarSpec& spec) {
  const std::string key = spec.key();
  {
    std::lock_guard lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it)
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
  }
  auto compiled = std::make_shared<const CompiledGrammar>(build_grammar(spec, limits_), vocab_);
  std::lock_guard lock(mu_);
  lru_.emplace_front(key, compiled);
  if (lru_.size() > capacity_) lru_.pop_back();
  return compiled;
}

}  // namespace zen::grammar
