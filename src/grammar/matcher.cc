#include "grammar/matcher.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "base/error.h"

namespace zen::grammar {

// A set of cursors, each a stack: persistent base node (or a sentinel) under local frames,
// laid out flat as [base, n, frame_0 .. frame_n-1] ...; frame_n-1 is the current state.
struct Level {
  std::vector<int32_t> data;
  std::vector<uint64_t> hashes;  // one per cursor, for deduplication
  bool popped = false;    // a run left the walked state's rule (base kUnknown)
  bool accepted = false;  // a run ended the grammar (base kRoot)
  void clear() {
    data.clear();
    hashes.clear();
    popped = accepted = false;
  }
  bool alive() const { return !data.empty(); }
};

namespace {

constexpr int32_t kRoot = -1;     // below the root rule's frame: popping it ends the grammar
constexpr int32_t kUnknown = -2;  // below the walked state: popping it leaves its rule

uint64_t hash_frames(int32_t base, const int32_t* f, size_t n) {
  auto mix = [](uint64_t h, int32_t x) {
    h = (h ^ static_cast<uint32_t>(x)) * 0x100000001B3ull;
    return h ^ (h >> 29);
  };
  uint64_t h = mix(0x9E3779B97F4A7C15ull, base);
  for (size_t i = 0; i < n; ++i) h = mix(h, f[i]);
  return h;
}

}  // namespace

// Steps cursor sets byte by byte: the pushdown automaton without committing anything.
class Runner {
 public:
  Runner(const Grammar& g, const std::vector<Matcher::Node>* nodes) : g_(g), nodes_(nodes) {}

  // out = in after consuming byte b (closed: every cursor's top consumes bytes).
  void step(const Level& in, uint8_t b, Level& out) {
    out.clear();
    const auto& d = in.data;
    // Fast path, the common case inside a string or number: one stack whose next state only
    // consumes bytes (no calls to push, cannot end its rule): just move the top.
    if (d.size() >= 3 && static_cast<size_t>(d[1]) + 2 == d.size()) {
      const int32_t to = g_.next(d.back(), b);
      if (to < 0) return;
      const Grammar::State& next = g_.state(to);
      if (next.calls.empty() && !next.accepting) {
        out.data.assign(d.begin(), d.end());
        out.data.back() = to;
        out.hashes.push_back(0);
        return;
      }
    }
    for (size_t pos = 0; pos < d.size();) {
      const int32_t base = d[pos];
      const auto n = static_cast<size_t>(d[pos + 1]);
      const int32_t* f = &d[pos + 2];
      pos += 2 + n;
      const int32_t to = g_.next(f[n - 1], b);
      if (to < 0) continue;
      work_.assign(f, f + n);
      work_.back() = to;
      visited_.clear();
      visited_hashes_.clear();
      close(base, out);
    }
  }

  // The closure of one stack (base under frames), added to out.
  void close_stack(int32_t base, std::span<const int32_t> frames, Level& out) {
    work_.assign(frames.begin(), frames.end());
    visited_.clear();
    visited_hashes_.clear();
    close(base, out);
  }

 private:
  void emit(int32_t base, Level& out) {
    const uint64_t h = hash_frames(base, work_.data(), work_.size());
    size_t pos = 0;
    for (uint64_t other : out.hashes) {
      const auto n = static_cast<size_t>(out.data[pos + 1]);
      if (other == h && out.data[pos] == base && n == work_.size() &&
          std::equal(work_.begin(), work_.end(), out.data.begin() + static_cast<ptrdiff_t>(pos + 2)))
        return;
      pos += 2 + n;
    }
    out.hashes.push_back(h);
    out.data.push_back(base);
    out.data.push_back(static_cast<int32_t>(work_.size()));
    out.data.insert(out.data.end(), work_.begin(), work_.end());
  }

  // Pops are the only way a closure can come back to a stack it has seen (a loop over a rule
  // that matches the empty string), so they are checked against visited_: exactly, the hash
  // only skips unequal ones (two stacks whose hashes collided once ended a closure early and
  // made advance() refuse the token the mask had allowed).
  bool first_visit(int32_t base) {
    const uint64_t h = hash_frames(base, work_.data(), work_.size());
    size_t pos = 0;
    for (uint64_t other : visited_hashes_) {
      const auto n = static_cast<size_t>(visited_[pos + 1]);
      if (other == h && visited_[pos] == base && n == work_.size() &&
          std::equal(work_.begin(), work_.end(), visited_.begin() + static_cast<ptrdiff_t>(pos + 2)))
        return false;
      pos += 2 + n;
    }
    visited_hashes_.push_back(h);
    visited_.push_back(base);
    visited_.push_back(static_cast<int32_t>(work_.size()));
    visited_.insert(visited_.end(), work_.begin(), work_.end());
    return true;
  }

  void close(int32_t base, Level& out) {
    const Grammar::State& s = g_.state(work_.back());
    if (!s.bytes.empty()) emit(base, out);
    for (const Grammar::CallEdge& c : s.calls) {
      const int32_t here = work_.back();
      work_.back() = c.to;
      work_.push_back(g_.rule_start(c.rule));
      close(base, out);
      work_.pop_back();
      work_.back() = here;
    }
    if (!s.accepting) return;
    const int32_t here = work_.back();
    work_.pop_back();
    if (!work_.empty()) {
      if (first_visit(base)) close(base, out);
    } else if (base == kUnknown) {
      out.popped = true;
    } else if (base == kRoot) {
      out.accepted = true;
    } else {
      const Matcher::Node& below = (*nodes_)[static_cast<size_t>(base)];
      work_.push_back(below.state);
      if (first_visit(below.parent)) close(below.parent, out);
      work_.pop_back();
    }
    work_.push_back(here);
  }

  const Grammar& g_;
  const std::vector<Matcher::Node>* nodes_;
  std::vector<int32_t> work_;
  std::vector<uint64_t> visited_hashes_;
  std::vector<int32_t> visited_;  // [base, n, frames...] per stack visited by this closure
};

// ---- per-state classification ---------------------------------------------------------------

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {}

const TokenClasses& CompiledGrammar::masks(int32_t state, int32_t below) const {
  const uint64_t id = (static_cast<uint64_t>(static_cast<uint32_t>(below)) << 32) | static_cast<uint32_t>(state);
  {
    std::lock_guard lock(mu_);
    auto it = masks_.find(id);
    if (it != masks_.end()) return *it->second;
  }
  std::string key = grammar_->state_key(state, kClassDepth);
  if (below >= 0 && !key.empty()) {
    const std::string under = grammar_->state_key(below, kClassDepth);
    key = under.empty() ? "" : key + "|" + under;
  }
  std::shared_ptr<const TokenClasses> m = key.empty() ? nullptr : vocab_->shared_classes(key);
  if (!m) {
    m = std::make_shared<const TokenClasses>(classify(state, below));
    if (!key.empty()) vocab_->share_classes(key, m);
  }
  std::lock_guard lock(mu_);
  auto [it, fresh] = masks_.emplace(id, std::move(m));
  return *it->second;
}

void CompiledGrammar::precompute() const {
  for (int32_t s = 0; s < grammar_->num_states(); ++s)
    if (!grammar_->state(s).bytes.empty()) masks(s);
}

TokenClasses CompiledGrammar::classify(int32_t state, int32_t below) const {
  const auto& nodes = vocab_->nodes();
  const auto& sorted = vocab_->sorted();
  Runner run(*grammar_, nullptr);
  thread_local std::vector<Level> levels(256);  // scratch, reused: most walks are short
  levels[0].clear();
  if (below >= 0) levels[0].data = {kUnknown, 2, below, state};
  else levels[0].data = {kUnknown, 1, state};
  // simple[d] >= 0: levels[d] is the single stack [simple[d]] over kUnknown (inside a string
  // or number most of the trie is walked so; stepping it is one transition).
  std::vector<int32_t> simple(256, -1);
  simple[0] = below >= 0 ? -1 : state;
  std::vector<char> popped_before(257, 0);  // a run left the rule at a depth < d
  auto next_of = [&](int32_t from, uint8_t b) { return grammar_->next(from, b); };
  std::vector<uint64_t> allowed(static_cast<size_t>(vocab_->size() + 63) / 64, 0);
  TokenClasses m;
  int64_t n_allowed = 0;
  const std::string* prev_uncertain = nullptr;
  auto uncertain = [&](int32_t tok) {
    const std::string& b = vocab_->bytes(tok);
    size_t lcp = 0;
    if (prev_uncertain)
      while (lcp < b.size() && lcp < prev_uncertain->size() && b[lcp] == (*prev_uncertain)[lcp]) ++lcp;
    m.uncertain.push_back(tok);
    m.uncertain_lcp.push_back(static_cast<uint8_t>(lcp));
    prev_uncertain = &b;
  };
  for (size_t i = 0; i < nodes.size();) {
    const Vocabulary::Node& nd = nodes[i];
    const size_t d = nd.depth;
    if (d >= kClassDepth) {  // beyond what the key saw: check at mask time
      for (int32_t k = nd.tok_begin; k < nd.tok_end; ++k) uncertain(sorted[static_cast<size_t>(k)]);
      i = static_cast<size_t>(nd.end);
      continue;
    }
    Level& here = levels[d];
    simple[d] = -1;
    bool alive, popped;
    if (const int32_t from = simple[d - 1]; from >= 0) {
      // Single stack: levels[d - 1] was never written, the state alone says it all.
      const int32_t to = next_of(from, nd.byte);
      alive = popped = false;
      if (to >= 0) {
        const Grammar::State& next = grammar_->state(to);
        if (next.calls.empty() && !next.accepting) {
          simple[d] = to;
          alive = true;
        } else {
          here.clear();
          run.close_stack(kUnknown, std::span<const int32_t>(&to, 1), here);
          alive = here.alive();
          popped = here.popped;
        }
      }
    } else {
      run.step(levels[d - 1], nd.byte, here);
      alive = here.alive();
      popped = here.popped;
    }
    const bool left_before = popped_before[d - 1];
    const bool ends_ok = alive || popped;
    for (int32_t k = nd.tok_begin; k < nd.tok_begin + nd.own_count; ++k) {
      const int32_t tok = sorted[static_cast<size_t>(k)];
      if (ends_ok) {
        allowed[static_cast<size_t>(tok) >> 6] |= uint64_t{1} << (tok & 63);
        ++n_allowed;
      } else if (left_before) {
        uncertain(tok);
      }
    }
    if (!alive) {
      if (left_before || popped)
        for (int32_t k = nd.tok_begin + nd.own_count; k < nd.tok_end; ++k) uncertain(sorted[static_cast<size_t>(k)]);
      i = static_cast<size_t>(nd.end);
      continue;
    }
    popped_before[d] = left_before || popped;
    ++i;
  }
  // A list when short, else a bitset.
  if (n_allowed * 32 > vocab_->size()) {
    m.allowed_bits = std::move(allowed);
  } else {
    for (size_t w = 0; w < allowed.size(); ++w)
      for (uint64_t bits = allowed[w]; bits != 0; bits &= bits - 1)
        m.allowed.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits))));
  }
  return m;
}

// ---- matcher ----------------------------------------------------------------------------------

int32_t Matcher::intern(int32_t state, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
  auto [it, fresh] = node_ids_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (fresh) nodes_.push_back({state, parent});
  return it->second;
}

namespace {

// The configuration as a level: each stack as its top frame over its persistent parent.
template <typename Nodes>
void load(const std::vector<int32_t>& stacks, const Nodes& nodes, Level& level) {
  level.clear();
  for (int32_t id : stacks) {
    level.data.push_back(nodes[static_cast<size_t>(id)].parent);
    level.data.push_back(1);
    level.data.push_back(nodes[static_cast<size_t>(id)].state);
    level.hashes.push_back(0);
  }
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  const Grammar& g = grammar_->grammar();
  Runner run(g, &nodes_);
  Level start;
  const int32_t root_start = g.rule_start(g.root());
  run.close_stack(kRoot, std::span<const int32_t>(&root_start, 1), start);
  history_.push_back(commit(start));
}

Matcher::Config Matcher::commit(const Level& level) {
  Config c;
  c.accepting = level.accepted;
  for (size_t pos = 0; pos < level.data.size();) {
    int32_t node = level.data[pos];
    const auto n = static_cast<size_t>(level.data[pos + 1]);
    for (size_t i = 0; i < n; ++i) node = intern(level.data[pos + 2 + i], node);
    c.stacks.push_back(node);
    pos += 2 + n;
  }
  std::sort(c.stacks.begin(), c.stacks.end());
  c.stacks.erase(std::unique(c.stacks.begin(), c.stacks.end()), c.stacks.end());
  return c;
}

namespace {

// Runs a token's bytes from the configuration into a; false when the token is forbidden
// (a run dies, or the grammar ends before its last byte).
template <typename Nodes>
bool run_token(const Grammar& g, const Nodes& nodes, const std::vector<int32_t>& stacks, const std::string& bytes,
               Level& a, Level& b) {
  Runner run(g, &nodes);
  load(stacks, nodes, a);
  for (size_t i = 0; i < bytes.size(); ++i) {
    run.step(a, static_cast<uint8_t>(bytes[i]), b);
    std::swap(a, b);
    if (!a.alive()) return i + 1 == bytes.size() && a.accepted;
  }
  return true;
}

}  // namespace

bool Matcher::allows(int32_t token) const {
  const Vocabulary& v = grammar_->vocab();
  if (token < 0 || token >= v.size()) return false;
  const Config& c = history_.back();
  if (std::find(v.stop_ids().begin(), v.stop_ids().end(), token) != v.stop_ids().end()) return c.accepting;
  const std::string& bytes = v.bytes(token);
  if (bytes.empty()) return false;
  Level a, b;
  return run_token(grammar_->grammar(), nodes_, c.stacks, bytes, a, b);
}

bool Matcher::advance(int32_t token) {
  const Vocabulary& v = grammar_->vocab();
  if (token < 0 || token >= v.size()) return false;
  if (std::find(v.stop_ids().begin(), v.stop_ids().end(), token) != v.stop_ids().end()) {
    if (!accepting()) return false;
    history_.push_back(Config{{}, true});  // after a stop token nothing else is allowed
    return true;
  }
  const std::string& bytes = v.bytes(token);
  Level a, b;
  if (bytes.empty() || !run_token(grammar_->grammar(), nodes_, history_.back().stacks, bytes, a, b)) return false;
  history_.push_back(commit(a));
  return true;
}

size_t Matcher::allowed_prefix(std::span<const int32_t> tokens) {
  size_t n = 0;
  while (n < tokens.size() && advance(tokens[n])) ++n;
  rollback(static_cast<int32_t>(n));
  return n;
}

void Matcher::rollback(int32_t n) {
  ZEN_CHECK(n >= 0 && n <= num_advanced(), n, " of ", num_advanced());
  history_.resize(history_.size() - static_cast<size_t>(n));
}

void Matcher::fill_mask(std::span<uint64_t> words) const {
  const Vocabulary& v = grammar_->vocab();
  ZEN_CHECK(words.size() * 64 >= static_cast<size_t>(v.size()), words.size());
  std::fill(words.begin(), words.end(), 0);
  const Config& c = history_.back();
  auto set = [&](int32_t t) { words[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63); };
  auto has = [&](int32_t t) { return (words[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1; };
  if (c.accepting)
    for (int32_t t : v.stop_ids()) set(t);
  const Grammar& g = grammar_->grammar();
  std::vector<std::pair<int32_t, int32_t>> seen;  // (state, below) classified
  for (int32_t id : c.stacks) {
    const Node& top = nodes_[static_cast<size_t>(id)];
    const int32_t below = g.short_rule(g.state(top.state).rule) && top.parent >= 0
                              ? nodes_[static_cast<size_t>(top.parent)].state
                              : -1;
    if (std::find(seen.begin(), seen.end(), std::pair{top.state, below}) != seen.end()) continue;
    seen.emplace_back(top.state, below);
    const TokenClasses& m = grammar_->masks(top.state, below);
    if (!m.allowed_bits.empty()) {
      for (size_t w = 0; w < m.allowed_bits.size(); ++w) words[w] |= m.allowed_bits[w];
    } else {
      for (int32_t t : m.allowed) set(t);
    }
    // Uncertain tokens against the whole configuration, reusing the levels of the shared
    // prefix with the previous token; a prefix that died kills every token extending it.
    if (m.uncertain.empty()) continue;
    Runner run(g, &nodes_);
    thread_local std::vector<Level> levels(256);  // scratch: no allocation once warm
    load(c.stacks, nodes_, levels[0]);
    size_t valid = 0;       // levels[0..valid] hold the previous token's prefix
    size_t dead_at = 256;   // depth whose level died on the previous path
    for (size_t j = 0; j < m.uncertain.size(); ++j) {
      const int32_t tok = m.uncertain[j];
      const size_t lcp = m.uncertain_lcp[j];
      if (lcp >= dead_at) continue;
      dead_at = 256;
      if (has(tok)) {
        valid = std::min(valid, lcp);
        continue;
      }
      const std::string& bytes = v.bytes(tok);
      size_t d = std::min(valid, lcp);
      for (; d < bytes.size(); ++d) {
        run.step(levels[d], static_cast<uint8_t>(bytes[d]), levels[d + 1]);
        if (!levels[d + 1].alive()) break;
      }
      if (d == bytes.size()) {
        valid = d;
        if (levels[d].alive() || levels[d].accepted) set(tok);
      } else {
        valid = d + 1;
        if (d + 1 == bytes.size() && levels[d + 1].accepted) set(tok);
        else dead_at = d + 1;
      }
    }
  }
}

}  // namespace zen::grammar
