// One entry point from "what the user asked for" (a JSON Schema, free JSON, a regex, a GBNF
// grammar, a choice list) to a CompiledGrammar, with a cache keyed by the request's text so a
// schema sent again reuses its compiled automata and the token masks computed so far.
#pragma once
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/tool_calls.h"

namespace zen::grammar {

struct GrammarSpec {
  enum class Kind { JsonSchema, JsonObject, JsonValue, Regex, Gbnf, Choice, ToolCalls };
  Kind kind = Kind::JsonValue;
  std::string text;                  // schema JSON, regex, GBNF text
  std::vector<std::string> choices;  // Choice: the output is exactly one of these
  JsonSchemaOptions json;            // JsonSchema / JsonObject / JsonValue
  ToolGrammarSpec tools;             // ToolCalls
  // Reasoning models: the grammar starts after the reasoning. Open: the prompt left a
  // <think> block open, so free text up to "</think>" comes first; Optional: the model may
  // open one itself. Either way whitespace may follow "</think>".
  enum class Reasoning { None, Open, Optional };
  Reasoning reasoning = Reasoning::None;
  std::string key() const;           // the cache key: kind, options and text
};

// Compilation is bounded: a grammar past GrammarLimits or the time bound is refused with a
// zen::Error (SchemaError for schema faults), never a hang.
struct CompileLimits {
  GrammarLimits grammar;
  double max_seconds = 2.0;
};

std::shared_ptr<const Grammar> build_grammar(const GrammarSpec& spec, const CompileLimits& limits = {});

class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t capacity = 64, CompileLimits limits = {})
      : vocab_(std::move(vocab)), capacity_(capacity), limits_(limits) {}
  // Throws what build_grammar throws; failures are not cached.
  std::shared_ptr<const CompiledGrammar> get(const GrammarSpec& spec);
  const Vocabulary& vocab() const { return *vocab_; }
  const std::shared_ptr<const Vocabulary>& vocab_ptr() const { return vocab_; }

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  size_t capacity_;
  CompileLimits limits_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;  // most recent first
};

}  // namespace zen::grammar
