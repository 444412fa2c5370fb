#include "spec/suffix.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace zen::spec {

// ---------------------------------------------------------------------------------------------
// SuffixTree

SuffixTree::SuffixTree(int32_t max_depth) : max_depth_(max_depth) {
  ZEN_CHECK(max_depth >= 1, max_depth);
}

int64_t SuffixTree::num_nodes() const {
  return static_cast<int64_t>(nodes_.size()) - 1 - static_cast<int64_t>(free_nodes_.size());
}

int32_t SuffixTree::find(int32_t node, int32_t token) const {
  if (node == kRoot) {
    const auto it = root_children_.find(token);
    return it == root_children_.end() ? kNone : it->second;
  }
  const Node& x = nodes_[static_cast<size_t>(node)];
  if (x.fan == kNone) return x.one.node != kNone && x.one.token == token ? x.one.node : kNone;
  const std::vector<Edge>& f = fans_[static_cast<size_t>(x.fan)];
  const auto it = std::lower_bound(f.begin(), f.end(), token, [](const Edge& e, int32_t t) { return e.token < t; });
  return it != f.end() && it->token == token ? it->node : kNone;
}

std::span<const SuffixTree::Edge> SuffixTree::children(int32_t node) const {
  const Node& x = nodes_[static_cast<size_t>(node)];
  if (x.fan != kNone) return fans_[static_cast<size_t>(x.fan)];
  if (x.one.node != kNone) return {&x.one, 1};
  return {};
}

int32_t SuffixTree::new_node() {
  if (!free_nodes_.empty()) {
    const int32_t n = free_nodes_.back();
    free_nodes_.pop_back();
    return n;  // free_subtree left it reset
  }
  ZEN_CHECK(nodes_.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), "suffix tree too large");
  nodes_.emplace_back();
  return static_cast<int32_t>(nodes_.size() - 1);
}

int32_t SuffixTree::add_child(int32_t node, int32_t token) {
  const int32_t c = new_node();  // first: it may grow nodes_ under a reference
  if (node == kRoot) {
    root_children_.emplace(token, c);
    return c;
  }
  Node& x = nodes_[static_cast<size_t>(node)];
  const Edge e{token, c};
  if (x.fan != kNone) {
    std::vector<Edge>& f = fans_[static_cast<size_t>(x.fan)];
    f.insert(std::lower_bound(f.begin(), f.end(), token, [](const Edge& a, int32_t t) { return a.token < t; }), e);
  } else if (x.one.node == kNone) {
    x.one = e;
  } else {  // second child: move both to a sorted list
    if (free_fans_.empty()) {
      x.fan = static_cast<int32_t>(fans_.size());
      fans_.emplace_back();
    } else {
      x.fan = free_fans_.back();
      free_fans_.pop_back();
    }
    fans_[static_cast<size_t>(x.fan)] = x.one.token < token ? std::vector<Edge>{x.one, e} : std::vector<Edge>{e, x.one};
    x.one = Edge{0, kNone};
  }
  return c;
}

void SuffixTree::remove_child(int32_t node, int32_t token) {
  if (node == kRoot) {
    root_children_.erase(token);
    return;
  }
  Node& x = nodes_[static_cast<size_t>(node)];
  if (x.fan == kNone) {
    ZEN_CHECK(x.one.node != kNone && x.one.token == token, token);
    x.one = Edge{0, kNone};
    return;
  }
  std::vector<Edge>& f = fans_[static_cast<size_t>(x.fan)];
  const auto it = std::lower_bound(f.begin(), f.end(), token, [](const Edge& e, int32_t t) { return e.token < t; });
  ZEN_CHECK(it != f.end() && it->token == token, token);
  f.erase(it);
  if (f.size() == 1) {  // back to the inline form
    x.one = f.front();
    release_fan(x.fan);
    x.fan = kNone;
  }
}

void SuffixTree::release_fan(int32_t fan) {
  std::vector<Edge>().swap(fans_[static_cast<size_t>(fan)]);  // give the memory back, not just the size
  free_fans_.push_back(fan);
}

void SuffixTree::free_subtree(int32_t node) {
  std::vector<int32_t> stack{node};
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    for (const Edge& e : children(n)) stack.push_back(e.node);
    if (nodes_[static_cast<size_t>(n)].fan != kNone) release_fan(nodes_[static_cast<size_t>(n)].fan);
    nodes_[static_cast<size_t>(n)] = Node{};
    free_nodes_.push_back(n);
  }
}

void SuffixTree::append(std::vector<int32_t>& tail, int32_t token) {
  // The substrings ending at the new token are those ending at the previous one, extended by
  // it, plus the token alone; the one that would exceed max_depth falls off.
  const auto step = [&](int32_t node) {
    int32_t c = find(node, token);
    if (c == kNone) c = add_child(node, token);
    ++nodes_[static_cast<size_t>(c)].count;
    return c;
  };
  const size_t keep = std::min(tail.size() + 1, static_cast<size_t>(max_depth_));
  tail.resize(keep);
  for (size_t k = keep - 1; k >= 1; --k) tail[k] = step(tail[k - 1]);  // longest first: reads tail[k - 1] unchanged
  tail[0] = step(kRoot);
  ++nodes_[kRoot].count;
}

void SuffixTree::insert(std::span<const int32_t> seq) {
  std::vector<int32_t> tail;
  tail.reserve(static_cast<size_t>(max_depth_));
  for (const int32_t t : seq) append(tail, t);
}

void SuffixTree::erase(std::span<const int32_t> seq) {
  ZEN_CHECK(num_tokens() >= static_cast<int64_t>(seq.size()));
  nodes_[kRoot].count -= static_cast<int32_t>(seq.size());
  const size_t depth = static_cast<size_t>(max_depth_);
  for (size_t i = 0; i < seq.size(); ++i) {
    int32_t node = kRoot;
    for (size_t k = i; k < std::min(seq.size(), i + depth); ++k) {
      const int32_t c = find(node, seq[k]);
      ZEN_CHECK(c != kNone, "erasing a sequence that was never inserted");
      // A count reaching 0 means this occurrence was the only one through c, so everything
      // below c is this occurrence's alone too: drop it all.
      if (--nodes_[static_cast<size_t>(c)].count == 0) {
        remove_child(node, seq[k]);
        free_subtree(c);
        break;
      }
      node = c;
    }
  }
}

int32_t SuffixTree::walk(std::span<const int32_t> s) const {
  int32_t node = kRoot;
  for (const int32_t t : s) {
    node = find(node, t);
    if (node == kNone) break;
  }
  return node;
}

SuffixDraft SuffixTree::follow(int32_t node, int32_t budget, double min_prob) const {
  SuffixDraft d;
  double prob = 1;
  while (static_cast<int32_t>(d.tokens.size()) < budget) {
    // Children are sorted by token, so the first maximum count is the smallest such token.
    const Edge* pick = nullptr;
    int32_t pick_count = 0;
    for (const Edge& e : children(node)) {
      const int32_t c = nodes_[static_cast<size_t>(e.node)].count;
      if (c > pick_count) {
        pick = &e;
        pick_count = c;
      }
    }
    if (pick == nullptr) break;
    prob *= static_cast<double>(pick_count) / static_cast<double>(nodes_[static_cast<size_t>(node)].count);
    if (prob < min_prob) break;
    d.tokens.push_back(pick->token);
    d.score += prob;
    node = pick->node;
  }
  return d;
}

SuffixDraft SuffixTree::speculate(std::span<const int32_t> context, int32_t max_tokens, const SuffixOptions& o) const {
  SuffixDraft best;
  if (max_tokens <= 0) return best;
  const size_t longest = std::min(context.size(), static_cast<size_t>(max_depth_));
  // Every match length, shortest first: a longer one may have no continuation left within the
  // depth, or a weaker one, so the score decides (as Arctic does), not the length alone.
  for (size_t m = 1; m <= longest; ++m) {
    const int32_t node = walk(context.last(m));
    if (node == kNone) break;  // no longer suffix of the context occurs either
    // + 1e-9: factor x m that is an integer in exact arithmetic must not floor to one less.
    const double limit = std::floor(o.max_spec_factor * static_cast<double>(m) + o.max_spec_offset + 1e-9);
    if (limit < 1) continue;
    const auto budget = static_cast<int32_t>(std::min(static_cast<double>(max_tokens), limit));
    SuffixDraft d = follow(node, budget, o.min_token_prob);
    // >=: on equal scores the longer match (more context agreeing) wins.
    if (!d.tokens.empty() && d.score >= best.score) {
      best = std::move(d);
      best.match_len = static_cast<int32_t>(m);
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// SuffixProposer

SuffixProposer::SuffixProposer(const SuffixOptions& options)
    : o_(options), global_(std::max(options.max_tree_depth, 1)) {  // validated below, with a message
  if (o_.max_tree_depth < 1) fail("suffix max_tree_depth must be at least 1, got ", o_.max_tree_depth);
  if (!(o_.max_spec_factor >= 0)) fail("suffix max_spec_factor must be >= 0, got ", o_.max_spec_factor);
  if (std::isnan(o_.max_spec_offset)) fail("suffix max_spec_offset must be a number, got ", o_.max_spec_offset);
  if (!(o_.min_token_prob >= 0 && o_.min_token_prob <= 1))
    fail("suffix min_token_prob must be in [0, 1], got ", o_.min_token_prob);
  // Node counts are int32: the global trie's root counts every cached token.
  if (o_.max_cached_tokens < 0 || o_.max_cached_tokens > std::numeric_limits<int32_t>::max())
    fail("suffix max_cached_tokens must be in [0, 2^31), got ", o_.max_cached_tokens);
}

bool SuffixProposer::still_valid(const Request& r, std::span<const int32_t> tokens, int64_t begin) const {
  // Cheap check that tokens extend what was indexed: same start, not shorter, same last
  // max_tree_depth indexed tokens. O(depth), where comparing everything would be O(tokens) a
  // step; a rewrite further back that keeps the length and the end goes unnoticed.
  if (r.begin != begin || static_cast<int64_t>(tokens.size()) < r.end) return false;
  const auto from = static_cast<size_t>(r.end) - r.recent.size();
  return std::equal(r.recent.begin(), r.recent.end(), tokens.begin() + static_cast<std::ptrdiff_t>(from));
}

SuffixProposer::Request& SuffixProposer::sync(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t begin = o_.use_prompt ? 0 : std::clamp<int64_t>(prompt_len, 0, n);
  auto it = requests_.find(seq_id);
  if (it == requests_.end() || !still_valid(it->second, tokens, begin)) {
    if (it == requests_.end()) it = requests_.emplace(seq_id, Request(o_.max_tree_depth)).first;
    else it->second = Request(o_.max_tree_depth);  // shrunk or rewritten: rebuild from scratch
    it->second.begin = it->second.end = begin;
  }
  Request& r = it->second;
  if (n == r.end) return r;
  for (int64_t i = r.end; i < n; ++i) r.tree.append(r.tail, tokens[static_cast<size_t>(i)]);
  r.end = n;
  const int64_t from = std::max(begin, n - o_.max_tree_depth);
  r.recent.assign(tokens.begin() + from, tokens.end());
  return r;
}

void SuffixProposer::propose(std::span<DraftSlot> slots) {
  for (DraftSlot& s : slots) {
    s.draft.clear();
    s.q.clear();
    const Request& r = sync(s.seq_id, s.tokens, s.prompt_len);  // also builds an unseen sequence's trie
    SuffixDraft best = r.tree.speculate(s.tokens, s.max_tokens, o_);
    if (!cached_.empty()) {
      SuffixDraft g = global_.speculate(s.tokens, s.max_tokens, o_);
      if (g.score > best.score) best = std::move(g);  // ties: the request's own text
    }
    s.draft = std::move(best.tokens);
  }
}

void SuffixProposer::observe(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len, int32_t drafted,
                             int32_t accepted) {
  (void)drafted, (void)accepted;
  sync(seq_id, tokens, prompt_len);
}

void SuffixProposer::finish(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) {
  requests_.erase(seq_id);
  const auto p = static_cast<size_t>(std::clamp<int64_t>(prompt_len, 0, static_cast<int64_t>(tokens.size())));
  std::span<const int32_t> out = tokens.subspan(p);
  // An output over the whole budget keeps its end, the text nearest to what comes next.
  if (static_cast<int64_t>(out.size()) > o_.max_cached_tokens)
    out = out.last(static_cast<size_t>(o_.max_cached_tokens));
  if (out.empty()) return;
  cached_.emplace_back(out.begin(), out.end());
  global_.insert(out);
  cached_tokens_ += static_cast<int64_t>(out.size());
  while (cached_tokens_ > o_.max_cached_tokens) {  // evict the oldest outputs
    global_.erase(cached_.front());
    cached_tokens_ -= static_cast<int64_t>(cached_.front().size());
    cached_.pop_front();
  }
}

SuffixStats SuffixProposer::stats() const {
  SuffixStats st;
  st.requests = static_cast<int64_t>(requests_.size());
  for (const auto& [id, r] : requests_) st.request_nodes += r.tree.num_nodes();
  st.cached_requests = static_cast<int64_t>(cached_.size());
  st.cached_tokens = cached_tokens_;
  st.global_nodes = global_.num_nodes();
  return st;
}

}  // namespace zen::spec
