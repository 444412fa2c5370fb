// GrammarBuilder (expressions, UTF-8 ranges) and the compile step: Thompson NFA per rule,
// subset construction over bytes and calls, trimming, left-recursion check.
#include "grammar/grammar.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <span>
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

// seen: scratch of nfa.nodes.size() stamps, so a closure costs its own size, not the NFA's.
std::vector<int32_t> eps_closure(const Nfa& nfa, std::vector<int32_t> set, std::vector<uint32_t>& seen, uint32_t& stamp) {
  if (++stamp == 0) {
    std::fill(seen.begin(), seen.end(), 0);
    stamp = 1;
  }
  std::vector<int32_t> out;
  for (int32_t s : set)
    if (seen[static_cast<size_t>(s)] != stamp) {
      seen[static_cast<size_t>(s)] = stamp;
      out.push_back(s);
    }
  for (size_t i = 0; i < out.size(); ++i)
    for (int32_t t : nfa.nodes[static_cast<size_t>(out[i])].eps)
      if (seen[static_cast<size_t>(t)] != stamp) {
        seen[static_cast<size_t>(t)] = stamp;
        out.push_back(t);
      }
  std::sort(out.begin(), out.end());
  return out;
}

void check_deadline(const GrammarLimits& limits) {
  if (std::chrono::steady_clock::now() > limits.deadline) fail("grammar too complex: compiling it took past the time bound");
}

// Byte classes of a set of byte sets: bytes none of them tells apart. Returns each class's
// members; cls[b] is byte b's class.
template <typename Sets>
std::vector<ByteSet> byte_classes(const Sets& each_set, std::array<int32_t, 256>& cls) {
  cls.fill(0);
  int32_t n = 1;
  std::set<std::array<uint64_t, 4>> seen;
  each_set([&](const ByteSet& bs) {
    if (!seen.insert(bs.bits).second) return;
    std::map<std::pair<int32_t, bool>, int32_t> split;
    for (int c = 0; c < 256; ++c) {
      auto [it, fresh] = split.emplace(std::make_pair(cls[static_cast<size_t>(c)], bs.has(static_cast<uint8_t>(c))),
                                       static_cast<int32_t>(split.size()));
      cls[static_cast<size_t>(c)] = it->second;
    }
    n = static_cast<int32_t>(split.size());
  });
  std::vector<ByteSet> members(static_cast<size_t>(n));
  for (int c = 0; c < 256; ++c) members[static_cast<size_t>(cls[static_cast<size_t>(c)])].add(static_cast<uint8_t>(c));
  return members;
}

Dfa determinize(const Nfa& nfa, int32_t start, int32_t end, int64_t& budget, const GrammarLimits& limits) {
  Dfa dfa;
  // Work per byte class, not per byte: a string's classes are a dozen.
  std::array<int32_t, 256> cls;
  const std::vector<ByteSet> members = byte_classes(
      [&](auto&& f) {
        for (const auto& node : nfa.nodes)
          for (const auto& [bs, to] : node.bytes) f(bs);
      },
      cls);
  std::vector<uint8_t> rep(members.size());
  for (size_t k = 0; k < members.size(); ++k)
    for (int c = 255; c >= 0; --c)
      if (members[k].has(static_cast<uint8_t>(c))) rep[k] = static_cast<uint8_t>(c);
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  std::vector<uint32_t> seen(nfa.nodes.size(), 0);
  uint32_t stamp = 0;
  auto intern = [&](std::vector<int32_t> set) {
    set = eps_closure(nfa, std::move(set), seen, stamp);
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
    std::vector<std::vector<int32_t>> by_class(members.size());
    std::map<int32_t, std::vector<int32_t>> by_rule;
    for (int32_t s : set) {
      if (s == end) accepting = true;
      const auto& n = nfa.nodes[static_cast<size_t>(s)];
      for (const auto& [bs, to] : n.bytes)
        for (size_t k = 0; k < members.size(); ++k)
          if (bs.has(rep[k])) by_class[k].push_back(to);
      for (const auto& [rule, to] : n.calls) by_rule[rule].push_back(to);
    }
    std::map<std::vector<int32_t>, ByteSet> targets;  // same target set -> one edge
    for (size_t k = 0; k < members.size(); ++k) {
      auto& t = by_class[k];
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      targets[t] = targets[t] | members[k];
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

// Merges equivalent states: Hopcroft's partition refinement over byte classes and calls.
// Subset construction leaves e.g. one "inside the string" state per kind of character just
// read; merged, a string has one content state, whose token classes are computed once.
Dfa minimize(const Dfa& dfa, const GrammarLimits& limits) {
  const auto n = static_cast<int32_t>(dfa.states.size());
  // Byte classes: bytes no edge set tells apart; one representative byte each.
  std::array<int32_t, 256> cls;
  const std::vector<ByteSet> members = byte_classes(
      [&](auto&& f) {
        for (const auto& st : dfa.states)
          for (const auto& [bs, to] : st.bytes) f(bs);
      },
      cls);
  const auto n_cls = static_cast<int32_t>(members.size());
  std::vector<uint8_t> rep(members.size());
  for (int c = 255; c >= 0; --c) rep[static_cast<size_t>(cls[static_cast<size_t>(c)])] = static_cast<uint8_t>(c);
  std::map<int32_t, int32_t> call_sym;  // callee rule -> symbol
  for (const auto& st : dfa.states)
    for (const auto& [rule, to] : st.calls) call_sym.emplace(rule, n_cls + static_cast<int32_t>(call_sym.size()));
  const int32_t n_sym = n_cls + static_cast<int32_t>(call_sym.size());
  if (static_cast<int64_t>(n + 1) * n_sym > 50'000'000) return dfa;  // too big to table: keep as is
  // Total transition function with a sink (state n) for missing edges.
  const int32_t sink = n;
  std::vector<int32_t> delta(static_cast<size_t>(n + 1) * static_cast<size_t>(n_sym), sink);
  auto at = [&](int32_t s, int32_t a) -> int32_t& { return delta[static_cast<size_t>(s) * static_cast<size_t>(n_sym) + static_cast<size_t>(a)]; };
  for (int32_t s = 0; s < n; ++s) {
    const auto& st = dfa.states[static_cast<size_t>(s)];
    for (const auto& [bs, to] : st.bytes)
      for (int32_t k = 0; k < n_cls; ++k)
        if (bs.has(rep[static_cast<size_t>(k)])) at(s, k) = to;
    for (const auto& [rule, to] : st.calls) at(s, call_sym[rule]) = to;
  }
  // Predecessors per symbol (CSR): pred[a] over targets.
  std::vector<int32_t> pstart(static_cast<size_t>(n_sym) * static_cast<size_t>(n + 2), 0), plist(delta.size());
  auto pidx = [&](int32_t a, int32_t t) { return static_cast<size_t>(a) * static_cast<size_t>(n + 2) + static_cast<size_t>(t); };
  for (int32_t s = 0; s <= n; ++s)
    for (int32_t a = 0; a < n_sym; ++a) ++pstart[pidx(a, at(s, a) + 1)];
  for (int32_t a = 0; a < n_sym; ++a)
    for (int32_t t = 0; t <= n; ++t) pstart[pidx(a, t + 1)] += pstart[pidx(a, t)];
  {
    std::vector<int32_t> fill(pstart);
    size_t base = 0;
    for (int32_t a = 0; a < n_sym; ++a) {
      for (int32_t s = 0; s <= n; ++s) plist[base + static_cast<size_t>(fill[pidx(a, at(s, a))]++)] = s;
      base += static_cast<size_t>(n + 1);
    }
  }
  auto preds = [&](int32_t a, int32_t t) {
    const size_t base = static_cast<size_t>(a) * static_cast<size_t>(n + 1);
    return std::span<const int32_t>(plist.data() + base + pstart[pidx(a, t)], plist.data() + base + pstart[pidx(a, t + 1)]);
  };
  // Blocks: contiguous ranges of elems; marked states move to the front of their block.
  std::vector<int32_t> elems(static_cast<size_t>(n + 1)), loc(static_cast<size_t>(n + 1)), block_of(static_cast<size_t>(n + 1));
  std::vector<int32_t> first, end, marked;
  {
    int32_t k = 0;
    for (int pass = 0; pass < 2; ++pass) {
      const int32_t start = k;
      for (int32_t s = 0; s <= n; ++s) {
        const bool acc = s < n && dfa.states[static_cast<size_t>(s)].accepting;
        if (acc == (pass == 0)) {
          elems[static_cast<size_t>(k)] = s;
          loc[static_cast<size_t>(s)] = k++;
          block_of[static_cast<size_t>(s)] = static_cast<int32_t>(first.size());
        }
      }
      if (k > start) {
        first.push_back(start);
        end.push_back(k);
        marked.push_back(0);
      } else {
        // no state of this kind: nothing to add
      }
    }
  }
  std::vector<std::vector<char>> in_work;  // [block][symbol]
  std::vector<std::pair<int32_t, int32_t>> work;
  auto add_work = [&](int32_t b, int32_t a) {
    if (in_work.size() <= static_cast<size_t>(b)) in_work.resize(static_cast<size_t>(b) + 1, std::vector<char>(static_cast<size_t>(n_sym), 0));
    if (!in_work[static_cast<size_t>(b)][static_cast<size_t>(a)]) {
      in_work[static_cast<size_t>(b)][static_cast<size_t>(a)] = 1;
      work.emplace_back(b, a);
    }
  };
  {
    int32_t smaller = 0;
    if (first.size() == 2 && end[1] - first[1] < end[0] - first[0]) smaller = 1;
    for (int32_t a = 0; a < n_sym; ++a) add_work(smaller, a);
  }
  std::vector<int32_t> touched, splitter;
  int64_t iterations = 0;
  while (!work.empty()) {
    if ((++iterations & 1023) == 0) check_deadline(limits);
    const auto [b, a] = work.back();
    work.pop_back();
    in_work[static_cast<size_t>(b)][static_cast<size_t>(a)] = 0;
    splitter.assign(elems.begin() + first[static_cast<size_t>(b)], elems.begin() + end[static_cast<size_t>(b)]);
    touched.clear();
    for (int32_t t : splitter)
      for (int32_t s : preds(a, t)) {
        const int32_t y = block_of[static_cast<size_t>(s)];
        const int32_t pos = loc[static_cast<size_t>(s)];
        const int32_t front = first[static_cast<size_t>(y)] + marked[static_cast<size_t>(y)];
        if (pos < front) continue;  // already marked
        const int32_t other = elems[static_cast<size_t>(front)];
        std::swap(elems[static_cast<size_t>(pos)], elems[static_cast<size_t>(front)]);
        loc[static_cast<size_t>(other)] = pos;
        loc[static_cast<size_t>(s)] = front;
        if (marked[static_cast<size_t>(y)]++ == 0) touched.push_back(y);
      }
    for (int32_t y : touched) {
      const auto yi = static_cast<size_t>(y);
      const int32_t m = marked[yi];
      marked[yi] = 0;
      if (m == end[yi] - first[yi]) continue;  // the whole block: no split
      const auto nb = static_cast<int32_t>(first.size());
      first.push_back(first[yi]);
      end.push_back(first[yi] + m);
      marked.push_back(0);
      first[yi] += m;
      for (int32_t i = first[static_cast<size_t>(nb)]; i < end[static_cast<size_t>(nb)]; ++i)
        block_of[static_cast<size_t>(elems[static_cast<size_t>(i)])] = nb;
      const bool new_smaller = end[static_cast<size_t>(nb)] - first[static_cast<size_t>(nb)] <= end[yi] - first[yi];
      for (int32_t c = 0; c < n_sym; ++c) {
        const bool y_in = in_work.size() > yi && in_work[yi][static_cast<size_t>(c)];
        if (y_in) add_work(nb, c);
        else add_work(new_smaller ? nb : y, c);
      }
    }
  }
  // Rebuild: one state per block, the start's block first; the sink's block is dropped.
  const int32_t sink_block = block_of[static_cast<size_t>(sink)];
  std::vector<int32_t> id(first.size(), -1);
  int32_t count = 0;
  id[static_cast<size_t>(block_of[0])] = count++;
  for (int32_t s = 0; s < n; ++s) {
    const int32_t blk = block_of[static_cast<size_t>(s)];
    if (blk != sink_block && id[static_cast<size_t>(blk)] < 0) id[static_cast<size_t>(blk)] = count++;
  }
  Dfa out;
  out.states.resize(static_cast<size_t>(count));
  std::vector<char> done(static_cast<size_t>(count), 0);
  for (int32_t s = 0; s < n; ++s) {
    const int32_t blk = block_of[static_cast<size_t>(s)];
    const int32_t b = id[static_cast<size_t>(blk)];
    if (b < 0 || done[static_cast<size_t>(b)]) continue;
    done[static_cast<size_t>(b)] = 1;
    const Dfa::State& st = dfa.states[static_cast<size_t>(s)];
    Dfa::State& o = out.states[static_cast<size_t>(b)];
    o.accepting = st.accepting;
    std::map<int32_t, ByteSet> by_target;
    for (const auto& [bs, to] : st.bytes) {
      const int32_t t = id[static_cast<size_t>(block_of[static_cast<size_t>(to)])];
      if (t >= 0) by_target[t] = by_target[t] | bs;
    }
    for (const auto& [t, bs] : by_target) o.bytes.push_back({bs, t});
    for (const auto& [rule, to] : st.calls) {
      const int32_t t = id[static_cast<size_t>(block_of[static_cast<size_t>(to)])];
      if (t >= 0) o.calls.push_back({rule, t});
    }
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
  // the end through bytes and productive calls: a backward search from the accepting states;
  // a call edge counts once its callee turns productive (linear, not a fixpoint sweep: a
  // repeat of 10^5 is a chain of 10^5 states).
  std::vector<char> productive(n_rules, 0);
  std::vector<std::vector<char>> live(n_rules);
  std::vector<std::vector<std::vector<int32_t>>> byte_preds(n_rules);  // [rule][state] -> states
  std::vector<std::vector<std::vector<std::pair<int32_t, int32_t>>>> call_preds(n_rules);  // -> (callee, state)
  std::vector<std::vector<std::pair<size_t, int32_t>>> waiting(n_rules);  // callee -> (rule, state)
  std::vector<std::pair<size_t, int32_t>> todo_live;
  for (size_t r = 0; r < n_rules; ++r) {
    if (!reached[r]) continue;
    const auto& states = dfas[r].states;
    live[r].assign(states.size(), 0);
    byte_preds[r].resize(states.size());
    call_preds[r].resize(states.size());
    for (size_t st = 0; st < states.size(); ++st) {
      for (const auto& [bs, to] : states[st].bytes) byte_preds[r][static_cast<size_t>(to)].push_back(static_cast<int32_t>(st));
      for (const auto& [callee, to] : states[st].calls)
        call_preds[r][static_cast<size_t>(to)].push_back({callee, static_cast<int32_t>(st)});
      if (states[st].accepting) todo_live.push_back({r, static_cast<int32_t>(st)});
    }
  }
  auto make_live = [&](size_t r, int32_t st) {
    if (live[r][static_cast<size_t>(st)]) return;
    live[r][static_cast<size_t>(st)] = 1;
    todo_live.push_back({r, st});
  };
  for (auto& [r, st] : todo_live) live[r][static_cast<size_t>(st)] = 1;
  while (!todo_live.empty()) {
    const auto [r, st] = todo_live.back();
    todo_live.pop_back();
    if (st == 0 && !productive[r]) {
      productive[r] = 1;
      for (const auto& [wr, ws] : waiting[r]) make_live(wr, ws);
      waiting[r].clear();
    }
    for (int32_t p : byte_preds[r][static_cast<size_t>(st)]) make_live(r, p);
    for (const auto& [callee, p] : call_preds[r][static_cast<size_t>(st)]) {
      if (productive[static_cast<size_t>(callee)]) make_live(r, p);
      else waiting[static_cast<size_t>(callee)].push_back({r, p});
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
  g->build_tables();
  g->find_short_rules();
  return g;
}

std::string Grammar::state_key(int32_t start, int depth) const {
  constexpr size_t kMaxKeyedStates = 4096;
  // Pass 1: each state's least byte depth from start (a 0-1 search: a call reaches its callee's
  // start at once, and its return state one byte later at least when the callee must begin
  // with a byte). States at `depth` are not expanded.
  std::unordered_map<int32_t, int32_t> dist{{start, 0}};
  std::deque<int32_t> todo{start};
  auto relax = [&](int32_t s, int32_t d, bool front) {
    auto [it, fresh] = dist.emplace(s, d);
    if (!fresh && it->second <= d) return;
    it->second = d;
    if (front) todo.push_front(s);
    else todo.push_back(s);
  };
  while (!todo.empty()) {
    if (dist.size() > kMaxKeyedStates) return "";
    const int32_t s = todo.front();
    todo.pop_front();
    const int32_t d = dist[s];
    if (d >= depth) continue;
    const State& st = states_[static_cast<size_t>(s)];
    for (const ByteEdge& e : st.bytes) relax(e.to, d + 1, false);
    for (const CallEdge& c : st.calls) {
      const State& callee = states_[static_cast<size_t>(rule_start(c.rule))];
      const bool consumes = !callee.accepting && callee.calls.empty();
      relax(rule_start(c.rule), d, true);
      relax(c.to, d + (consumes ? 1 : 0), !consumes);
    }
  }
  // Pass 2: states numbered in discovery order; a frontier state is keyed by its depth alone.
  std::unordered_map<int32_t, int32_t> canon;  // state -> discovery index
  std::vector<int32_t> order{start};
  canon[start] = 0;
  auto index = [&](int32_t s) {
    auto [it, fresh] = canon.emplace(s, static_cast<int32_t>(order.size()));
    if (fresh) order.push_back(s);
    return it->second;
  };
  std::string key = "D" + std::to_string(depth) + ":";
  for (size_t i = 0; i < order.size(); ++i) {
    const State& st = states_[static_cast<size_t>(order[i])];
    if (dist.at(order[i]) >= depth) {
      key += "F;";
      continue;
    }
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

void Grammar::find_short_rules() {
  constexpr int32_t kShortBytes = 16;  // a JSON surrogate pair escaped is 12 bytes
  short_rule_.assign(rule_start_.size(), 0);
  std::vector<std::vector<int32_t>> of_rule(rule_start_.size());
  for (size_t s = 0; s < states_.size(); ++s) of_rule[static_cast<size_t>(states_[s].rule)].push_back(static_cast<int32_t>(s));
  for (size_t r = 0; r < rule_start_.size(); ++r) {
    if (rule_start_[r] < 0) continue;
    bool leaf = true;
    for (int32_t s : of_rule[r]) leaf = leaf && states_[static_cast<size_t>(s)].calls.empty();
    if (!leaf) continue;
    // Every path ends within kShortBytes bytes (a cycle never does): step the set of states
    // reachable after n bytes until it empties.
    std::set<int32_t> here{rule_start_[r]};
    for (int32_t n = 0; n <= kShortBytes && !here.empty(); ++n) {
      std::set<int32_t> next;
      for (int32_t s : here)
        for (const ByteEdge& e : states_[static_cast<size_t>(s)].bytes) next.insert(e.to);
      here = std::move(next);
    }
    short_rule_[r] = here.empty();
  }
}

void Grammar::build_tables() {
  rule_class_.assign(rule_start_.size(), {});
  std::vector<int32_t> n_classes(rule_start_.size(), 1);
  std::vector<std::vector<int32_t>> of_rule(rule_start_.size());
  std::vector<std::vector<uint8_t>> reps(rule_start_.size());  // a byte of each class
  for (size_t s = 0; s < states_.size(); ++s) of_rule[static_cast<size_t>(states_[s].rule)].push_back(static_cast<int32_t>(s));
  for (size_t r = 0; r < rule_start_.size(); ++r) {
    std::array<int32_t, 256> cls;
    const auto members = byte_classes(
        [&](auto&& f) {
          for (int32_t s : of_rule[r])
            for (const ByteEdge& e : states_[static_cast<size_t>(s)].bytes) f(e.set);
        },
        cls);
    // 256 classes at most: each fits a byte.
    for (int b = 0; b < 256; ++b) rule_class_[r][static_cast<size_t>(b)] = static_cast<uint8_t>(cls[static_cast<size_t>(b)]);
    n_classes[r] = static_cast<int32_t>(members.size());
    reps[r].resize(members.size());
    for (int b = 255; b >= 0; --b) reps[r][static_cast<size_t>(cls[static_cast<size_t>(b)])] = static_cast<uint8_t>(b);
  }
  table_at_.resize(states_.size());
  table_.clear();
  for (size_t s = 0; s < states_.size(); ++s) {
    const State& st = states_[s];
    table_at_[s] = static_cast<int32_t>(table_.size());
    const auto r = static_cast<size_t>(st.rule);
    table_.resize(table_.size() + static_cast<size_t>(n_classes[r]), -1);
    for (size_t k = 0; k < reps[r].size(); ++k)
      for (const ByteEdge& e : st.bytes)
        if (e.set.has(reps[r][k])) table_[static_cast<size_t>(table_at_[s]) + k] = e.to;
  }
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
      const int32_t to = g.next(st.back(), b);
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
      const int32_t to = g.next(st.back(), static_cast<uint8_t>(ch));
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
