// Grammar IR for constrained decoding. Front ends (JSON Schema, regex, GBNF, choice lists)
// describe a grammar as rules whose bodies are regular expressions over bytes and references
// to other rules (a GrammarBuilder); build() compiles each body into a byte NFA (Grammar),
// which the Matcher runs as a pushdown automaton over token bytes.
//
// Why rule bodies are regular expressions and not BNF sequences: repetition inside a rule
// stays a loop in that rule's automaton instead of a recursive helper rule, so a position in
// the middle of a string or number is one (rule, state) pair, and the tokens that stay inside
// the rule from there are decided by that pair alone (xgrammar's context-independent tokens):
// their mask is computed once and cached.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zen::grammar {

// Which bytes a terminal accepts.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  ByteSet operator|(const ByteSet& o) const {
    ByteSet r;
    for (int i = 0; i < 4; ++i) r.bits[i] = bits[i] | o.bits[i];
    return r;
  }
  bool operator==(const ByteSet&) const = default;
  static ByteSet of(uint8_t b) { ByteSet s; s.add(b); return s; }
  static ByteSet range(uint8_t lo, uint8_t hi) { ByteSet s; s.add_range(lo, hi); return s; }
};

// A node of a rule body. Expressions are immutable and may be shared between rules.
using ExprId = int32_t;
struct Expr {
  enum Kind : uint8_t { Empty, Bytes, Rule, Seq, Alt, Repeat, Until } kind = Empty;
  ByteSet bytes;              // Bytes
  int32_t rule = -1;          // Rule
  std::vector<ExprId> kids;   // Seq, Alt; Repeat: one
  int32_t min = 0, max = 0;   // Repeat: max -1 = unbounded
  std::string text;           // Until: the terminator
  bool may_end = false;       // Until: without the terminator, ending anywhere (see until())
};

// Code point ranges, inclusive; surrogates (D800-DFFF) are never encoded.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// Size bounds: a front end that would exceed them gets a zen::Error ("grammar too large"),
// so a pathological schema or pattern fails fast instead of exhausting memory.
struct GrammarLimits {
  int64_t max_exprs = 2'000'000;     // expression nodes
  int64_t max_nfa_states = 2'000'000;  // states of all rule automata together
  // build() gives up past this point ("grammar too complex"); default: no deadline.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

class Grammar;

class GrammarBuilder {
 public:
  explicit GrammarBuilder(GrammarLimits limits = {});

  // Rules. add_rule declares one (its body set later, so rules may refer to each other and
  // to themselves); names are for messages and GBNF lookups. A name already taken gets a
  // numeric suffix; rule_id returns -1 for an unknown name.
  int32_t add_rule(const std::string& name);
  int32_t rule_id(const std::string& name) const;
  const std::string& rule_name(int32_t rule) const { return rule_names_.at(static_cast<size_t>(rule)); }
  void set_body(int32_t rule, ExprId body);
  bool has_body(int32_t rule) const { return bodies_.at(static_cast<size_t>(rule)) >= 0; }
  int32_t num_rules() const { return static_cast<int32_t>(rule_names_.size()); }

  // Expressions.
  ExprId empty();
  ExprId bytes(const ByteSet& set);       // one byte from the set (an empty set matches nothing)
  ExprId literal(std::string_view text);  // these bytes in order
  ExprId ref(int32_t rule);
  ExprId seq(std::vector<ExprId> parts);
  ExprId alt(std::vector<ExprId> choices);  // no choices: matches nothing
  ExprId repeat(ExprId e, int32_t min, int32_t max);  // max -1: unbounded
  ExprId opt(ExprId e) { return repeat(e, 0, 1); }
  ExprId star(ExprId e) { return repeat(e, 0, -1); }
  ExprId plus(ExprId e) { return repeat(e, 1, -1); }
  // Free text (any bytes) up to and including the first occurrence of terminator; with
  // avoid_terminator, free text that never contains it and may end anywhere. Compiled to the
  // terminator's KMP automaton, so free text costs one state per terminator byte (reasoning
  // up to "</think>", text before a "<tool_call>").
  ExprId until(std::string_view terminator, bool avoid_terminator = false);
  // One code point from the ranges, UTF-8 encoded (ranges may overlap and come unsorted).
  ExprId codepoints(const CodepointRanges& ranges);
  ExprId any_codepoint() { return codepoints({{0, 0x10FFFF}}); }
  // One code point outside the ranges.
  ExprId codepoints_except(const CodepointRanges& excluded);

  const Expr& expr(ExprId id) const { return exprs_.at(static_cast<size_t>(id)); }
  int64_t num_exprs() const { return static_cast<int64_t>(exprs_.size()); }
  const GrammarLimits& limits() const { return limits_; }

  // Compiles the rules reachable from root. Throws zen::Error when a reachable rule has no
  // body, a rule is left-recursive (it could call itself without consuming a byte: the
  // matcher would never terminate), or a limit is exceeded.
  std::shared_ptr<const Grammar> build(int32_t root) const;

 private:
  ExprId add(Expr e);
  GrammarLimits limits_;
  std::vector<Expr> exprs_;
  std::vector<std::string> rule_names_;
  std::vector<ExprId> bodies_;
  std::unordered_map<std::string, int32_t> by_name_;
};

// Compiled grammar: each rule an epsilon-free NFA. States are numbered globally; a state
// belongs to one rule. Byte edges consume a byte; call edges push the callee's start and
// return to their target state.
class Grammar {
 public:
  struct ByteEdge {
    ByteSet set;
    int32_t to;
  };
  struct CallEdge {
    int32_t rule;
    int32_t to;  // return state in the caller
  };
  struct State {
    int32_t rule = -1;
    bool accepting = false;           // the rule may end here (pop to the caller)
    std::vector<ByteEdge> bytes;
    std::vector<CallEdge> calls;
    // The target of byte b, or -1 (byte edges are disjoint).
    int32_t next(uint8_t b) const {
      for (const ByteEdge& e : bytes)
        if (e.set.has(b)) return e.to;
      return -1;
    }
  };

  int32_t root() const { return root_; }
  int32_t rule_start(int32_t rule) const { return rule_start_.at(static_cast<size_t>(rule)); }
  const std::string& rule_name(int32_t rule) const { return rule_names_.at(static_cast<size_t>(rule)); }
  int32_t num_rules() const { return static_cast<int32_t>(rule_start_.size()); }
  const State& state(int32_t s) const { return states_[static_cast<size_t>(s)]; }
  // The target of byte b from state s, or -1: one table lookup (per rule, bytes fall into a
  // few classes; each state keeps one target per class).
  int32_t next(int32_t s, uint8_t b) const {
    const auto& st = states_[static_cast<size_t>(s)];
    return table_[static_cast<size_t>(table_at_[static_cast<size_t>(s)]) + rule_class_[static_cast<size_t>(st.rule)][b]];
  }
  int32_t num_states() const { return static_cast<int32_t>(states_.size()); }
  // A canonical text of what can happen from state s within the next `depth` bytes (its
  // rule's automaton, the rules it calls, theirs...; states first reachable only after
  // `depth` bytes are keyed as a frontier): equal keys in two grammars mean the same
  // strings of fewer than `depth` bytes from there, so a state's token classes, for tokens
  // that short, can be shared. Bounding the depth lets the states of a long count (a string
  // of at most 5000 characters) share one key while far from the end. "" when even that
  // part is too large to key.
  std::string state_key(int32_t s, int depth) const;
  // A rule without calls whose strings are all short (a character, an escape): a token
  // usually finishes it partway, so the matcher classifies its states together with the
  // caller's return state below (see matcher.h).
  bool short_rule(int32_t rule) const { return short_rule_[static_cast<size_t>(rule)] != 0; }
  // After build(): rule bodies are deterministic over bytes and calls (a state's byte edges
  // are disjoint), every state can still reach its rule's end, every rule matches something,
  // and no rule can call itself before consuming a byte (closures terminate).

 private:
  friend class GrammarBuilder;
  int32_t root_ = -1;
  std::vector<int32_t> rule_start_;   // -1 for rules not reachable from root
  std::vector<std::string> rule_names_;
  std::vector<State> states_;
  std::vector<std::array<uint8_t, 256>> rule_class_;  // [rule][byte] -> class
  std::vector<int32_t> table_at_;                     // [state] -> offset in table_
  std::vector<int32_t> table_;                        // targets, one per class of the rule
  std::vector<char> short_rule_;                      // [rule]
  void build_tables();
  void find_short_rules();
};

// Whether the grammar, started at its root, matches all of text (a byte-level simulation of
// the pushdown automaton; for tests and tools, not the decoding hot path).
bool accepts(const Grammar& g, std::string_view text);
// The length of the longest prefix of text the grammar can continue (text.size() when every
// byte is allowed), for error messages and the `zen grammar --check` report.
size_t viable_prefix(const Grammar& g, std::string_view text);

}  // namespace zen::grammar
