// GrammarBuilder (expressions, UTF-8 ranges) and the compile step: Thompson NFA per rule,
// subset construction over bytes and calls, trimming, left-recursion check.
#include "grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "base/error.h"

namespace zen::grammar {

// ---- builder ------------------------------------------------------------------------------

GrammarBuilder::GrammarBuilder(GrammarLimits limits) : limits_(limits) {}

ExprId GrammarBuilder::add(Expr e) {
  if (num_exprs() >= limits_.max_exprs)
    fail("grammar too large: more than ", limits_.max_exprs, " expression nodes");
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

int32_t GrammarBuilder::add_rule(const std::string& name) {
  std::string unique = name;
  for (int i = 1; by_name_.count(unique); ++i) unique = name + "-" + std::to_string(i);
  const auto id = static_cast<int32_t>(rule_names_.size());
  rule_names_.push_back(unique);
  bodies_.push_back(-1);
  by_name_[unique] = id;
  return id;
}

int32_t GrammarBuilder::rule_id(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

void GrammarBuilder::set_body(int32_t rule, ExprId body) {
  ZEN_CHECK(rule >= 0 && rule < num_rules(), rule);
  ZEN_CHECK(body >= 0 && body < num_exprs(), body);
  bodies_[static_cast<size_t>(rule)] = body;
}

ExprId GrammarBuilder::empty() { return add(Expr{Expr::Empty}); }

ExprId GrammarBuilder::bytes(const ByteSet& set) {
  Expr e{Expr::Bytes};
  e.bytes = set;
  return add(std::move(e));
}

ExprId GrammarBuilder::literal(std::string_view text) {
  std::vector<ExprId> parts;
  for (char c : text) parts.push_back(bytes(ByteSet::of(static_cast<uint8_t>(c))));
  return seq(std::move(parts));
}

ExprId GrammarBuilder::ref(int32_t rule) {
  ZEN_CHECK(rule >= 0 && rule < num_rules(), rule);
  Expr e{Expr::Rule};
  e.rule = rule;
  return add(std::move(e));
}

ExprId GrammarBuilder::seq(std::vector<ExprId> parts) {
  if (parts.empty()) return empty();
  if (parts.size() == 1) return parts[0];
  Expr e{Expr::Seq};
  e.kids = std::move(parts);
  return add(std::move(e));
}

ExprId GrammarBuilder::alt(std::vector<ExprId> choices) {
  if (choices.size() == 1) return choices[0];
  Expr e{Expr::Alt};
  e.kids = std::move(choices);
  return add(std::move(e));
}

ExprId GrammarBuilder::repeat(ExprId x, int32_t min, int32_t max) {
  if (min < 0 || (max >= 0 && max < min)) fail("invalid repetition {", min, ",", max, "}");
  Expr e{Expr::Repeat};
  e.kids = {x};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

ExprId GrammarBuilder::until(std::string_view terminator, bool avoid_terminator) {
  if (terminator.empty()) fail("until: the terminator must not be empty");
  Expr e{Expr::Until};
  e.text = std::string(terminator);
  e.may_end = avoid_terminator;
  return add(std::move(e));
}

namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Sorted, merged, surrogates removed.
CodepointRanges normalize(CodepointRanges r) {
  std::sort(r.begin(), r.end());
  CodepointRanges out;
  for (auto [lo, hi] : r) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.push_back({lo, hi});
    }
  }
  CodepointRanges no_surrogates;
  for (auto [lo, hi] : out) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      no_surrogates.push_back({lo, hi});
      continue;
    }
    if (lo < 0xD800) no_surrogates.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF) no_surrogates.push_back({0xE000, hi});
  }
  return no_surrogates;
}

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

std::vector<uint8_t> utf8_encode(uint32_t cp) {
  switch (utf8_length(cp)) {
    case 1: return {static_cast<uint8_t>(cp)};
    case 2: return {static_cast<uint8_t>(0xC0 | (cp >> 6)), static_cast<uint8_t>(0x80 | (cp & 0x3F))};
    case 3:
      return {static_cast<uint8_t>(0xE0 | (cp >> 12)), static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)),
              static_cast<uint8_t>(0x80 | (cp & 0x3F))};
    default:
      return {static_cast<uint8_t>(0xF0 | (cp >> 18)), static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F)),
              static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)), static_cast<uint8_t>(0x80 | (cp & 0x3F))};
  }
}

// Splits [lo, hi] (same UTF-8 length) into ranges whose encodings are byte-wise ranges
// (every byte position independently spans [lo_i, hi_i]); the classic utf8-ranges split.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  const int n = utf8_length(lo);
  if (n != utf8_length(hi)) {
    const uint32_t edge = n == 1 ? 0x7F : n == 2 ? 0x7FF : 0xFFFF;
    utf8_sequences(lo, edge, out);
    utf8_sequences(edge + 1, hi, out);
    return;
  }
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  const auto a = utf8_encode(lo), b = utf8_encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

}  // namespace

ExprId GrammarBuilder::codepoints(const CodepointRanges& ranges) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
  for (auto [lo, hi] : normalize(ranges)) utf8_sequences(lo, hi, seqs);
  // Single-byte sequences merge into one byte set.
  ByteSet ascii;
  std::vector<ExprId> choices;
  for (const auto& s : seqs) {
    if (s.size() == 1) {
      ascii.add_range(s[0].first, s[0].second);
      continue;
    }
    std::vector<ExprId> parts;
    for (auto [a, b] : s) parts.push_back(bytes(ByteSet::range(a, b)));
    choices.push_back(seq(std::move(parts)));
  }
  if (!ascii.empty()) choices.insert(choices.begin(), bytes(ascii));
  return alt(std::move(choices));
}

ExprId GrammarBuilder::codepoints_except(const CodepointRanges& excluded) {
  CodepointRanges complement;
  uint32_t next = 0;
  for (auto [lo, hi] : normalize(excluded)) {
    if (lo > next) complement.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) complement.push_back({next, kMaxCodepoint});
  return codepoints(complement);
}

// ---- compile ------------------------------------------------------------------------------

namespace {

// Thompson NFA of one rule body, with epsilon edges.
struct Nfa {
  struct Node {
    std::vector<int32_t> eps;
    std::vector<std::pair<ByteSet, int32_t>> bytes;
    std::vector<std::pair<int32_t, int32_t>> calls;  // (rule, to)
  };
  std::vector<Node> nodes;
  int64_t budget = 0;  // nodes still allowed (grammar-wide limit)

  int32_t node() {
    if (--budget < 0) fail("grammar too large: more than the automaton state limit");
    nodes.emplace_back();
    return static_cast<int32_t>(nodes.size() - 1);
  }
  void eps(int32_t a, int32_t b) { nodes[static_cast<size_t>(a)].eps.push_back(b); }
};

// Appends expression e starting at `from`; returns its end node.
int32_t thompson(const GrammarBuilder& b, ExprId id, int32_t from, Nfa& nfa, int depth = 0) {
  if (depth > 10000) fail("grammar too deeply nested");
  const Expr& e = b.expr(id);
  switch (e.kind) {
    case Expr::Empty: return from;
    case Expr::Bytes: {
      const int32_t to = nfa.node();
      if (!e.bytes.empty()) nfa.nodes[static_cast<size_t>(from)].bytes.push_back({e.bytes, to});
      return to;
    }
    case Expr::Rule: {
      const int32_t to = nfa.node();
      nfa.nodes[static_cast<size_t>(from)].calls.push_back({e.rule, to});
      return to;
    }
    case Expr::Seq: {
      int32_t at = from;
      for (ExprId k : e.kids) at = thompson(b, k, at, nfa, depth + 1);
      return at;
    }
    case Expr::Alt: {
      const int32_t end = nfa.node();
      for (ExprId k : e.kids) {
        const int32_t start = nfa.node();
        nfa.eps(from, start);
        nfa.eps(thompson(b, k, start, nfa, depth + 1), end);
      }
      return end;
    }
    case Expr::Until: {
      // KMP automaton: node i = the longest terminator prefix the text ends with has length i.
      const std::string& t = e.text;
      const size_t m = t.size();
      std::vector<size_t> fail_link(m + 1, 0);
      for (size_t i = 1, k = 0; i < m; ++i) {
        while (k > 0 && t[i] != t[k]) k = fail_link[k];
        if (t[i] == t[k]) ++k;
        fail_link[i + 1] = k;
      }
      std::vector<int32_t> node(m + 1);
      node[0] = nfa.node();
      nfa.eps(from, node[0]);
      for (size_t i = 1; i <= m; ++i) node[i] = nfa.node();
      const int32_t end = e.may_end ? nfa.node() : node[m];
      for (size_t i = 0; i < m; ++i) {
        std::map<size_t, ByteSet> by_target;
        for (int c = 0; c < 256; ++c) {
          size_t k = i;
          while (k > 0 && static_cast<uint8_t>(t[k]) != c) k = fail_link[k];
          if (static_cast<uint8_t>(t[k]) == c) ++k;
          by_target[k].add(static_cast<uint8_t>(c));
        }
        for (const auto& [k, bs] : by_target)
          if (!(e.may_end && k == m)) nfa.nodes[static_cast<size_t>(node[i])].bytes.push_back({bs, node[k]});
        if (e.may_end) nfa.eps(node[i], end);
      }
      return end;
    }
    case Expr::Repeat: {
      // Each copy starts at a fresh node so loops never share entry points.
      auto copy = [&](int32_t at) {
        const int32_t start = nfa.node();
        nfa.eps(at, start);
        return thompson(b, e.kids[0], start, nfa, depth + 1);
      };
      int32_t at = from;
      for (int32_t i = 0; i < e.min; ++i) at = copy(at);
      if (e.max < 0) {
        const int32_t loop = nfa.node();
        nfa.eps(at, loop);
        nfa.eps(copy(loop), loop);
        return loop;
      }
      const int32_t end = nfa.node();
      for (int32_t i = e.min; i < e.max; ++i) {
        nfa.eps(at, end);
        at = copy(at);
      }
      nfa.eps(at, end);
      return end;
    }
  }
  return from;
}

// Deterministic automaton of one rule over bytes and calls (subset construction).
struct Dfa {
  struct State {
    bool accepting = false;
    std::vector<std::pair<ByteSet, int32_t>> bytes;   // disjoint sets
    std::vector<std::pair<int32_t, int32_t>> calls;   // one per callee
  };
  std::vector<State> states;  // 0 = start
};

std::vector<int32_t> eps_closure(const Nfa& nfa, std::vector<int32_t> set) {
  std::vector<char> seen(nfa.nodes.size(), 0);
  for (int32_t s : set) seen[static_cast<size_t>(s)] = 1;
  for (size_t i = 0; i < set.size(); ++i)
    for (int32_t t : nfa.nodes[static_cast<size_t>(set[i])].eps)
      if (!seen[static_cast<size_t>(t)]) {
        seen[static_cast<size_t>(t)] = 1;
        set.push_back(t);
      }
  std::sort(set.begin(), set.end());
  return set;
}

void check_deadline(const GrammarLimits& limits) {
  if (std::chrono::steady_clock::now() > limits.deadline) fail("grammar too complex: compiling it took past the time bound");
}

Dfa determinize(const Nfa& nfa, int32_t start, int32_t end, int64_t& budget, const GrammarLimits& limits) {
  Dfa dfa;
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  auto intern = [&](std::vector<int32_t> set) {
    set = eps_closure(nfa, std::move(set));
    auto [it, fresh] = ids.emplace(set, static_cast<int32_t>(sets.size()));
    if (fresh) {
      if (--budget < 0) fail("grammar too large: more than the automaton state limit");
      if ((budget & 255) == 0) check_deadline(limits);
      sets.push_back(set);
      dfa.states.emplace_back();
    }
    return it->second;
  };
  intern({start});
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::vector<int32_t> set = sets[i];
    bool accepting = false;
    std::array<std::vector<int32_t>, 256> by_byte;
    std::map<int32_t, std::vector<int32_t>> by_rule;
    for (int32_t s : set) {
      if (s == end) accepting = true;
      const auto& n = nfa.nodes[static_cast<size_t>(s)];
      for (const auto& [bs, to] : n.bytes)
        for (int c = 0; c < 256; ++c)
          if (bs.has(static_cast<uint8_t>(c))) by_byte[static_cast<size_t>(c)].push_back(to);
      for (const auto& [rule, to] : n.calls) by_rule[rule].push_back(to);
    }
    std::map<std::vector<int32_t>, ByteSet> targets;  // same target set -> one edge
    for (int c = 0; c < 256; ++c) {
      auto& t = by_byte[static_cast<size_t>(c)];
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      targets[t].add(static_cast<uint8_t>(c));
    }
    std::vector<std::pair<ByteSet, int32_t>> bytes;
    for (auto& [t, bs] : targets) bytes.push_back({bs, intern(t)});
    std::vector<std::pair<int32_t, int32_t>> calls;
    for (auto& [rule, t] : by_rule) calls.push_back({rule, intern(t)});
    Dfa::State& st = dfa.states[i];
    st.accepting = accepting;
    st.bytes = std::move(bytes);
    st.calls = std::move(calls);
  }
  return dfa;
}

// Merges equivalent states (Moore's partition refinement over bytes and calls). Subset
// construction leaves e.g. one "inside the string" state per kind of character just read;
// merged, a string has one content state, whose token classes are computed once.
Dfa minimize(const Dfa& dfa, const GrammarLimits& limits) {
  const size_t n = dfa.states.size();
  std::vector<int32_t> block(n);
  for (size_t s = 0; s < n; ++s) block[s] = dfa.states[s].accepting ? 1 : 0;
  size_t blocks = 0;
  for (int round = 0;; ++round) {
    if ((round & 15) == 15) check_deadline(limits);
    // A state's signature: its block, and per target block the bytes leading there, calls.
    std::map<std::string, int32_t> ids;
    std::vector<int32_t> next(n);
    for (size_t s = 0; s < n; ++s) {
      const Dfa::State& st = dfa.states[s];
      std::map<int32_t, ByteSet> by_block;
      for (const auto& [bs, to] : st.bytes) by_block[block[static_cast<size_t>(to)]] = by_block[block[static_cast<size_t>(to)]] | bs;
      std::string sig(reinterpret_cast<const char*>(&block[s]), sizeof(int32_t));
      for (const auto& [b, bs] : by_block) {
        sig.append(reinterpret_cast<const char*>(&b), sizeof(b));
        sig.append(reinterpret_cast<const char*>(bs.bits.data()), sizeof(bs.bits));
      }
      sig += '|';
      for (const auto& [rule, to] : st.calls) {
        sig.append(reinterpret_cast<const char*>(&rule), sizeof(rule));
        sig.append(reinterpret_cast<const char*>(&block[static_cast<size_t>(to)]), sizeof(int32_t));
      }
      next[s] = ids.emplace(std::move(sig), static_cast<int32_t>(ids.size())).first->second;
    }
    const bool stable = ids.size() == blocks;
    blocks = ids.size();
    block = std::move(next);
    if (stable) break;
  }
  // Renumber so the start's block is 0.
  std::vector<int32_t> id(blocks, -1);
  int32_t count = 0;
  id[static_cast<size_t>(block[0])] = count++;
  for (size_t s = 0; s < n; ++s)
    if (id[static_cast<size_t>(block[s])] < 0) id[static_cast<size_t>(block[s])] = count++;
  Dfa out;
  out.states.resize(blocks);
  std::vector<char> done(blocks, 0);
  for (size_t s = 0; s < n; ++s) {
    const auto b = static_cast<size_t>(id[static_cast<size_t>(block[s])]);
    if (done[b]) continue;
    done[b] = 1;
    const Dfa::State& st = dfa.states[s];
    Dfa::State& o = out.states[b];
    o.accepting = st.accepting;
    std::map<int32_t, ByteSet> by_target;
    for (const auto& [bs, to] : st.bytes) {
      const int32_t t = id[static_cast<size_t>(block[static_cast<size_t>(to)])];
      by_target[t] = by_target[t] | bs;
    }
    for (const auto& [t, bs] : by_target) o.bytes.push_back({bs, t});
    for (const auto& [rule, to] : st.calls) o.calls.push_back({rule, id[static_cast<size_t>(block[static_cast<size_t>(to)])]});
  }
  return out;
}

}  // namespace

std::shared_ptr<const Grammar> GrammarBuilder::build(int32_t root) const {
  ZEN_CHECK(root >= 0 && root < num_rules(), root);
  const auto n_rules = static_cast<size_t>(num_rules());
  // Rules reachable from the root, each compiled once.
  std::vector<Dfa> dfas(n_rules);
  std::vector<char> reached(n_rules, 0);
  std::vector<int32_t> todo{root};
  reached[static_cast<size_t>(root)] = 1;
  int64_t budget = limits_.max_nfa_states;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    if (bodies_[static_cast<size_t>(r)] < 0) fail("grammar rule '", rule_names_[static_cast<size_t>(r)], "' is used but not defined");
    Nfa nfa;
    nfa.budget = budget;
    const int32_t start = nfa.node();
    const int32_t end = thompson(*this, bodies_[static_cast<size_t>(r)], start, nfa);
    budget = nfa.budget;
    dfas[static_cast<size_t>(r)] = minimize(determinize(nfa, start, end, budget, limits_), limits_);
    check_deadline(limits_);
    for (const auto& st : dfas[static_cast<size_t>(r)].states)
      for (const auto& [callee, to] : st.calls)
        if (!reached[static_cast<size_t>(callee)]) {
          reached[static_cast<size_t>(callee)] = 1;
          todo.push_back(callee);
        }
  }

  // Productive rules (their language is not empty) and, per rule, the states that can reach
  // the end through bytes and productive calls: a fixpoint.
  std::vector<char> productive(n_rules, 0);
  std::vector<std::vector<char>> live(n_rules);
  for (size_t r = 0; r < n_rules; ++r) live[r].assign(dfas[r].states.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; ++r) {
      if (!reached[r]) continue;
      auto& states = dfas[r].states;
      for (size_t s = 0; s < states.size(); ++s) {
        if (live[r][s]) continue;
        bool ok = states[s].accepting;
        for (const auto& [bs, to] : states[s].bytes) ok = ok || live[r][static_cast<size_t>(to)];
        for (const auto& [callee, to] : states[s].calls)
          ok = ok || (productive[static_cast<size_t>(callee)] && live[r][static_cast<size_t>(to)]);
        if (ok) {
          live[r][s] = 1;
          changed = true;
          if (s == 0) productive[r] = 1;
        }
      }
    }
  }
  if (!productive[static_cast<size_t>(root)]) fail("grammar matches nothing (rule '", rule_names_[static_cast<size_t>(root)], "')");

  // Nullable rules (matching the empty string), then the "calls before consuming a byte"
  // graph, whose cycles are left recursion.
  std::vector<char> nullable(n_rules, 0);
  auto nullable_reach = [&](size_t r) {  // states reachable from the start without bytes
    std::vector<char> seen(dfas[r].states.size(), 0);
    std::vector<int32_t> stack{0};
    seen[0] = 1;
    std::vector<int32_t> order;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      order.push_back(s);
      for (const auto& [callee, to] : dfas[r].states[static_cast<size_t>(s)].calls)
        if (nullable[static_cast<size_t>(callee)] && !seen[static_cast<size_t>(to)]) {
          seen[static_cast<size_t>(to)] = 1;
          stack.push_back(to);
        }
    }
    return order;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; ++r) {
      if (!reached[r] || nullable[r] || !productive[r]) continue;
      for (int32_t s : nullable_reach(r))
        if (dfas[r].states[static_cast<size_t>(s)].accepting) {
          nullable[r] = 1;
          changed = true;
          break;
        }
    }
  }
  std::vector<std::vector<int32_t>> first_calls(n_rules);
  for (size_t r = 0; r < n_rules; ++r) {
    if (!reached[r] || !productive[r]) continue;
    for (int32_t s : nullable_reach(r))
      for (const auto& [callee, to] : dfas[r].states[static_cast<size_t>(s)].calls)
        if (productive[static_cast<size_t>(callee)] && live[r][static_cast<size_t>(to)])
          first_calls[r].push_back(callee);
  }
  std::vector<int8_t> color(n_rules, 0);  // 0 new, 1 on the path, 2 done
  std::function<void(size_t)> visit = [&](size_t r) {
    color[r] = 1;
    for (int32_t c : first_calls[r]) {
      const auto cr = static_cast<size_t>(c);
      if (color[cr] == 1) fail("grammar rule '", rule_names_[cr], "' is left-recursive (it can reach itself without consuming input)");
      if (color[cr] == 0) visit(cr);
    }
    color[r] = 2;
  };
  for (size_t r = 0; r < n_rules; ++r)
    if (reached[r] && productive[r] && color[r] == 0) visit(r);

  // Number the live states globally, each rule's start first.
  auto g = std::make_shared<Grammar>();
  g->root_ = root;
  g->rule_names_ = rule_names_;
  g->rule_start_.assign(n_rules, -1);
  std::vector<std::vector<int32_t>> global(n_rules);
  for (size_t r = 0; r < n_rules; ++r) {
    if (!reached[r] || !productive[r]) continue;
    global[r].assign(dfas[r].states.size(), -1);
    for (size_t s = 0; s < dfas[r].states.size(); ++s)
      if (live[r][s]) {
        global[r][s] = static_cast<int32_t>(g->states_.size());
        g->states_.emplace_back();
      }
    g->rule_start_[r] = global[r][0];
  }
  for (size_t r = 0; r < n_rules; ++r) {
    if (!reached[r] || !productive[r]) continue;
    for (size_t s = 0; s < dfas[r].states.size(); ++s) {
      if (global[r][s] < 0) continue;
      Grammar::State& st = g->states_[static_cast<size_t>(global[r][s])];
      const Dfa::State& d = dfas[r].states[s];
      st.rule = static_cast<int32_t>(r);
      st.accepting = d.accepting;
      for (const auto& [bs, to] : d.bytes)
        if (global[r][static_cast<size_t>(to)] >= 0) st.bytes.push_back({bs, global[r][static_cast<size_t>(to)]});
      for (const auto& [callee, to] : d.calls)
        if (productive[static_cast<size_t>(callee)] && global[r][static_cast<size_t>(to)] >= 0)
          st.calls.push_back({callee, global[r][static_cast<size_t>(to)]});
    }
  }
  return g;
}

std::string Grammar::state_key(int32_t start) const {
  constexpr size_t kMaxKeyedStates = 4096;
  std::unordered_map<int32_t, int32_t> canon;  // state -> discovery index
  std::vector<int32_t> order{start};
  canon[start] = 0;
  auto index = [&](int32_t s) {
    auto [it, fresh] = canon.emplace(s, static_cast<int32_t>(order.size()));
    if (fresh) order.push_back(s);
    return it->second;
  };
  std::string key;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order.size() > kMaxKeyedStates) return "";
    const State& st = states_[static_cast<size_t>(order[i])];
    key += st.accepting ? 'A' : 'S';
    for (const ByteEdge& e : st.bytes) {
      key += 'b';
      key.append(reinterpret_cast<const char*>(e.set.bits.data()), sizeof(e.set.bits));
      const int32_t to = index(e.to);
      key.append(reinterpret_cast<const char*>(&to), sizeof(to));
    }
    for (const CallEdge& c : st.calls) {
      key += 'c';
      const int32_t callee = index(rule_start(c.rule)), to = index(c.to);
      key.append(reinterpret_cast<const char*>(&callee), sizeof(callee));
      key.append(reinterpret_cast<const char*>(&to), sizeof(to));
    }
    key += ';';
  }
  return key;
}

// ---- reference simulation -------------------------------------------------------------------

namespace {

using Stack = std::vector<int32_t>;  // frames; back() is the current state

// Stacks reachable without input whose top can consume a byte; `accepted` when the root
// rule can end.
void close(const Grammar& g, Stack st, std::set<Stack>& out, std::set<Stack>& seen, bool& accepted) {
  if (!seen.insert(st).second) return;
  const Grammar::State& s = g.state(st.back());
  if (!s.bytes.empty()) out.insert(st);
  for (const auto& c : s.calls) {
    Stack next = st;
    next.back() = c.to;
    next.push_back(g.rule_start(c.rule));
    close(g, std::move(next), out, seen, accepted);
  }
  if (s.accepting) {
    if (st.size() == 1) {
      accepted = true;
    } else {
      Stack up(st.begin(), st.end() - 1);
      close(g, std::move(up), out, seen, accepted);
    }
  }
}

}  // namespace

size_t viable_prefix(const Grammar& g, std::string_view text) {
  std::set<Stack> cur, seen;
  bool accepted = false;
  close(g, {g.rule_start(g.root())}, cur, seen, accepted);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    std::set<Stack> next;
    seen.clear();
    accepted = false;
    for (const Stack& st : cur) {
      const int32_t to = g.state(st.back()).next(b);
      if (to < 0) continue;
      Stack moved = st;
      moved.back() = to;
      close(g, std::move(moved), next, seen, accepted);
    }
    if (next.empty() && !accepted) return i;
    cur = std::move(next);
  }
  return text.size();
}

bool accepts(const Grammar& g, std::string_view text) {
  std::set<Stack> cur, seen;
  bool accepted = false;
  close(g, {g.rule_start(g.root())}, cur, seen, accepted);
  for (char ch : text) {
    std::set<Stack> next;
    seen.clear();
    accepted = false;
    for (const Stack& st : cur) {
      const int32_t to = g.state(st.back()).next(static_cast<uint8_t>(ch));
      if (to < 0) continue;
      Stack moved = st;
      moved.back() = to;
      close(g, std::move(moved), next, seen, accepted);
    }
    if (next.empty() && !accepted) return false;
    cur = std::move(next);
  }
  return accepted;
}

}  // namespace zen::grammar
