#include "spec/suffix.h"

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <random>
#include <vector>

#include "base/error.h"

namespace zen::spec {
namespace {

using Tokens = std::vector<int32_t>;

Tokens draft(SuffixProposer& p, uint64_t id, const Tokens& tokens, int32_t k, int64_t prompt_len = 0) {
  DraftSlot s;
  s.seq_id = id;
  s.tokens = tokens;
  s.prompt_len = prompt_len;
  s.max_tokens = k;
  s.q = {0.5f};  // must come back empty: a point mass
  p.propose({&s, 1});
  EXPECT_TRUE(s.q.empty());
  EXPECT_LE(static_cast<int32_t>(s.draft.size()), k);
  return s.draft;
}

SuffixOptions opts(double factor = 1.0, double offset = 0.0, double min_prob = 0.1) {
  SuffixOptions o;
  o.max_spec_factor = factor;
  o.max_spec_offset = offset;
  o.min_token_prob = min_prob;
  return o;
}

Tokens random_tokens(std::mt19937& rng, size_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  Tokens t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

TEST(Suffix, RepeatedTextIsPredicted) {
  SuffixProposer p(opts());
  EXPECT_EQ(p.name(), "suffix");
  // "1 2 3" occurred before, followed by "4 5 1 2 3": a 3-token match drafts 3 tokens.
  EXPECT_EQ(draft(p, 1, {1, 2, 3, 4, 5, 1, 2, 3}, 8), (Tokens{4, 5, 1}));
  SuffixProposer q(opts(1.0, 2.0));
  EXPECT_EQ(draft(q, 1, {1, 2, 3, 4, 5, 1, 2, 3}, 8), (Tokens{4, 5, 1, 2, 3}));
}

TEST(Suffix, DraftLengthScalesWithMatchLength) {
  const Tokens four = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4};  // matches "1 2 3 4"
  const Tokens two = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 3, 4};         // matches "3 4" only
  {
    SuffixProposer p(opts(1.0));
    EXPECT_EQ(draft(p, 1, four, 16), (Tokens{5, 6, 7, 8}));
    EXPECT_EQ(draft(p, 2, two, 16), (Tokens{5, 6}));
  }
  {
    SuffixProposer p(opts(0.5));
    EXPECT_EQ(draft(p, 1, four, 16), (Tokens{5, 6}));
    EXPECT_EQ(draft(p, 2, two, 16), (Tokens{5}));
  }
  {
    SuffixProposer p(opts(2.0));
    EXPECT_EQ(draft(p, 1, four, 16), (Tokens{5, 6, 7, 8, 9, 10, 1, 2}));
  }
  {
    SuffixProposer p(opts(0.0, 3.0));  // the offset alone: 3 tokens whatever the match
    EXPECT_EQ(draft(p, 1, four, 16), (Tokens{5, 6, 7}));
    EXPECT_EQ(draft(p, 2, two, 16), (Tokens{5, 6, 7}));
  }
}

TEST(Suffix, MaxTokensRespected) {
  Tokens t;
  for (int32_t i = 0; i < 20; ++i) t.push_back(i);
  for (int32_t i = 0; i < 15; ++i) t.push_back(i);
  SuffixProposer p(opts(1.0, 100.0));
  EXPECT_EQ(draft(p, 1, t, 3), (Tokens{15, 16, 17}));
  EXPECT_EQ(draft(p, 1, t, 1), (Tokens{15}));
  EXPECT_EQ(draft(p, 1, t, 10).size(), 10u);
}

TEST(Suffix, NoMatchGivesEmptyDraft) {
  SuffixProposer p(opts(1.0, 5.0));
  EXPECT_TRUE(draft(p, 1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 8).empty());
  EXPECT_TRUE(draft(p, 2, {42}, 8).empty());
  p.finish(3, Tokens{0, 5, 6}, 1);  // the global trie knows "5 6", but not what follows "6"
  EXPECT_TRUE(draft(p, 4, {7, 5, 6}, 8).empty());
  EXPECT_EQ(draft(p, 5, {7, 5}, 8), (Tokens{6}));  // while "5" is continued
}

TEST(Suffix, MinTokenProbCutsUnlikelyBranches) {
  // In the request: "7" occurred 5 times, followed once each by 1, 2, 3, 4 (p = 0.2 each; the
  // tie goes to the smallest token).
  const Tokens t = {7, 1, 7, 2, 7, 3, 7, 4, 7};
  SuffixProposer loose(opts(1.0, 0.0, 0.1));
  EXPECT_EQ(draft(loose, 1, t, 4), (Tokens{1}));
  SuffixProposer strict(opts(1.0, 0.0, 0.25));
  EXPECT_TRUE(draft(strict, 1, t, 4).empty());

  // Mid-path: finished outputs agree on "5 6 7" (p = 1), then split four ways (p = 0.25).
  for (const double min_prob : {0.3, 0.2}) {
    SuffixProposer p(opts(1.0, 10.0, min_prob));
    for (int32_t last = 8; last <= 11; ++last) p.finish(100 + static_cast<uint64_t>(last), Tokens{0, 5, 6, 7, last}, 1);
    const Tokens d = draft(p, 1, {42, 5, 6}, 8, 3);
    EXPECT_EQ(d, min_prob > 0.25 ? (Tokens{7}) : (Tokens{7, 8})) << min_prob;
  }
}

TEST(Suffix, MostFrequentContinuationWins) {
  {
    SuffixProposer p(opts());
    p.finish(10, Tokens{1, 2}, 0);
    p.finish(11, Tokens{1, 3}, 0);
    p.finish(12, Tokens{1, 3}, 0);
    EXPECT_EQ(draft(p, 1, {9, 1}, 4, 2), (Tokens{3}));
  }
  {
    SuffixProposer p(opts());  // equal counts: the smallest token, whatever the order seen
    p.finish(10, Tokens{1, 5}, 0);
    p.finish(11, Tokens{1, 4}, 0);
    EXPECT_EQ(draft(p, 1, {9, 1}, 4, 2), (Tokens{4}));
  }
  {
    SuffixProposer p(opts());  // within the request: "1" -> 2 once, -> 3 twice
    EXPECT_EQ(draft(p, 1, {1, 2, 1, 3, 1, 3, 1}, 4).at(0), 3);
  }
}

TEST(Suffix, HigherScoringTreeWinsTiesGoToRequest) {
  const Tokens t = {1, 2, 1};  // the request's trie: "1" -> 2 with p = 1/2
  {
    SuffixProposer p(opts());
    p.finish(10, Tokens{1, 3}, 0);  // global: "1" -> 3 with p = 1
    EXPECT_EQ(draft(p, 1, t, 4), (Tokens{3}));
  }
  {
    SuffixProposer p(opts());
    p.finish(10, Tokens{1, 3}, 0);
    p.finish(11, Tokens{1, 4}, 0);  // global: "1" -> 3 with p = 1/2, a tie
    EXPECT_EQ(draft(p, 1, t, 4), (Tokens{2}));
  }
}

TEST(Suffix, GlobalTreeDraftsFinishedOutput) {
  SuffixProposer p(opts());
  const Tokens done = {100, 101, 1, 2, 3, 4, 5, 6, 7, 8};  // prompt 100 101, output 1..8
  p.observe(1, done, 2, 0, 0);
  EXPECT_EQ(p.stats().requests, 1);
  EXPECT_GT(p.stats().request_nodes, 0);
  p.finish(1, done, 2);
  EXPECT_EQ(p.stats().requests, 0);  // finish drops the request's trie
  EXPECT_EQ(p.stats().request_nodes, 0);
  EXPECT_EQ(p.stats().cached_requests, 1);
  EXPECT_EQ(p.stats().cached_tokens, 8);

  EXPECT_EQ(draft(p, 2, {50, 1, 2, 3}, 8, 4), (Tokens{4, 5, 6}));
  SuffixProposer wide(opts(1.0, 10.0));
  wide.finish(1, done, 2);
  EXPECT_EQ(draft(wide, 2, {50, 1, 2, 3}, 8, 4), (Tokens{4, 5, 6, 7, 8}));
  // Only the output is cached, not the prompt.
  EXPECT_TRUE(draft(wide, 3, {7, 100}, 8, 2).empty());
}

TEST(Suffix, EvictionKeepsCacheWithinBound) {
  SuffixOptions o = opts();
  o.max_cached_tokens = 10;
  SuffixProposer p(o);
  p.finish(1, Tokens{1, 2, 3, 4}, 0);
  p.finish(2, Tokens{11, 12, 13, 14}, 0);
  EXPECT_EQ(p.stats().cached_tokens, 8);
  p.finish(3, Tokens{21, 22, 23, 24}, 0);  // 12 > 10: the oldest goes
  EXPECT_EQ(p.stats().cached_tokens, 8);
  EXPECT_EQ(p.stats().cached_requests, 2);
  SuffixProposer fresh(o);
  fresh.finish(2, Tokens{11, 12, 13, 14}, 0);
  fresh.finish(3, Tokens{21, 22, 23, 24}, 0);
  EXPECT_EQ(p.stats().global_nodes, fresh.stats().global_nodes);
  EXPECT_TRUE(draft(p, 9, {0, 1, 2}, 4, 3).empty());
  EXPECT_EQ(draft(p, 9, {0, 21, 22}, 4, 3), (Tokens{23, 24}));

  p.finish(4, Tokens{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, 0);  // alone over the bound: keeps its end
  EXPECT_EQ(p.stats().cached_tokens, 10);
  EXPECT_EQ(p.stats().cached_requests, 1);
  SuffixProposer tail(o);
  tail.finish(4, Tokens{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, 0);
  EXPECT_EQ(p.stats().global_nodes, tail.stats().global_nodes);
  EXPECT_EQ(draft(p, 9, {0, 15, 16}, 4, 3), (Tokens{17, 18}));
  EXPECT_TRUE(draft(p, 9, {0, 8, 9}, 4, 3).empty());
}

// Many outputs over a small vocabulary (branching everywhere) through a small cache: after each
// eviction the global trie must be exactly the one built from the outputs still cached.
TEST(Suffix, EvictionMatchesFreshBuild) {
  std::mt19937 rng(7);
  SuffixOptions o = opts(1.0, 2.0, 0.0);
  o.max_tree_depth = 6;
  o.max_cached_tokens = 60;
  SuffixProposer p(o);
  std::deque<Tokens> kept;
  int64_t kept_tokens = 0;
  std::uniform_int_distribution<size_t> len(1, 25);
  for (uint64_t id = 0; id < 150; ++id) {
    const Tokens out = random_tokens(rng, len(rng), 4);
    p.finish(id, out, 0);
    kept.push_back(out);
    kept_tokens += static_cast<int64_t>(out.size());
    while (kept_tokens > o.max_cached_tokens) {
      kept_tokens -= static_cast<int64_t>(kept.front().size());
      kept.pop_front();
    }
    ASSERT_LE(p.stats().cached_tokens, o.max_cached_tokens);
    ASSERT_EQ(p.stats().cached_tokens, kept_tokens);
    if (id % 10 != 9) continue;
    SuffixProposer fresh(o);
    for (const Tokens& k : kept) fresh.finish(0, k, 0);
    ASSERT_EQ(p.stats().global_nodes, fresh.stats().global_nodes) << id;
    for (int i = 0; i < 10; ++i) {
      const Tokens ctx = random_tokens(rng, 5, 4);
      ASSERT_EQ(draft(p, 1000 + id, ctx, 6, 5), draft(fresh, 1000 + id, ctx, 6, 5));
    }
  }
  // The trie never holds more than the cache's substrings: at most tokens x depth nodes.
  EXPECT_LE(p.stats().global_nodes, o.max_cached_tokens * o.max_tree_depth);
}

TEST(Suffix, ShrinkOrRewriteRebuilds) {
  const SuffixOptions o = opts();
  const auto fresh_nodes = [&](const Tokens& t) {
    SuffixProposer f(o);
    f.observe(1, t, 0, 0, 0);
    return f.stats().request_nodes;
  };
  SuffixProposer p(o);
  p.observe(1, Tokens{1, 2, 3, 4, 5, 1, 2, 3}, 0, 0, 0);
  EXPECT_EQ(draft(p, 1, {1, 2, 3, 4, 5, 1, 2, 3}, 8), (Tokens{4, 5, 1}));
  // Same length, different text (recomputed after preemption).
  const Tokens rewritten = {1, 2, 3, 7, 8, 1, 2, 3};
  p.observe(1, rewritten, 0, 0, 0);
  EXPECT_EQ(draft(p, 1, rewritten, 8), (Tokens{7, 8, 1}));
  EXPECT_EQ(p.stats().request_nodes, fresh_nodes(rewritten));
  // Shrunk, then grown again along another path.
  p.observe(1, Tokens{1, 2, 3}, 0, 0, 0);
  EXPECT_EQ(p.stats().request_nodes, fresh_nodes({1, 2, 3}));
  const Tokens regrown = {1, 2, 3, 9, 1, 2, 3};
  p.observe(1, regrown, 4, 3, 1);
  EXPECT_EQ(draft(p, 1, regrown, 8), (Tokens{9, 1, 2}));
  EXPECT_EQ(p.stats().request_nodes, fresh_nodes(regrown));
  // A rewrite seen first by propose() is caught there too.
  const Tokens other = {4, 4, 5, 6, 4, 4};
  EXPECT_EQ(draft(p, 1, other, 8), (Tokens{5, 6}));
  EXPECT_EQ(p.stats().request_nodes, fresh_nodes(other));
  EXPECT_EQ(p.stats().requests, 1);
}

// Tokens arriving a few at a time build exactly the trie a single build does, and drafts
// are the same (deterministic) at every step.
TEST(Suffix, IncrementalMatchesFreshBuild) {
  std::mt19937 rng(3);
  SuffixOptions o = opts(1.0, 1.0, 0.05);
  o.max_tree_depth = 8;
  const Tokens all = random_tokens(rng, 400, 5);
  SuffixProposer inc(o);
  std::uniform_int_distribution<size_t> chunk(1, 4);
  for (size_t n = 1; n <= all.size(); n += chunk(rng)) {
    const Tokens t(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    inc.observe(1, t, 0, 0, 0);
    SuffixProposer once(o);
    const Tokens want = draft(once, 2, t, 6);
    ASSERT_EQ(draft(inc, 1, t, 6), want) << n;
    ASSERT_EQ(inc.stats().request_nodes, once.stats().request_nodes) << n;
  }
}

TEST(Suffix, UsePromptFalseIndexesOnlyOutput) {
  const Tokens prompt = {1, 2, 3, 4, 5, 1, 2, 3};
  SuffixOptions o = opts();
  SuffixProposer with(o);
  EXPECT_EQ(draft(with, 1, prompt, 8, 8), (Tokens{4, 5, 1}));
  o.use_prompt = false;
  SuffixProposer without(o);
  EXPECT_TRUE(draft(without, 1, prompt, 8, 8).empty());
  EXPECT_EQ(without.stats().request_nodes, 0);
  Tokens t = prompt;
  t.insert(t.end(), {7, 8, 9, 7, 8});
  EXPECT_EQ(draft(without, 1, t, 8, 8), (Tokens{9, 7}));
}

// 100k tokens of text that never repeats (the worst case: every substring is new) at depth 24.
TEST(Suffix, LongRequestStaysCompact) {
  std::mt19937 rng(11);
  const Tokens t = random_tokens(rng, 100000, 32000);
  SuffixProposer p(opts());
  const auto start = std::chrono::steady_clock::now();
  for (size_t n = 16; n <= t.size(); n += 16)
    p.observe(1, std::span<const int32_t>(t).first(n), 0, 0, 0);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t nodes = p.stats().request_nodes;
  EXPECT_LE(nodes, 100000 * 24);
  EXPECT_GT(nodes, 100000 * 20);  // really that many: the bound above is not vacuous
  EXPECT_LT(secs, 30.0);          // generous: sanitizer builds run this too
  Tokens again = t;
  again.insert(again.end(), t.begin() + 500, t.begin() + 510);
  EXPECT_EQ(draft(p, 1, again, 5), Tokens(t.begin() + 510, t.begin() + 515));
  p.finish(1, again, static_cast<int64_t>(again.size()));
  EXPECT_EQ(p.stats().requests, 0);
}

TEST(Suffix, RejectsBadOptions) {
  SuffixOptions o;
  o.max_tree_depth = 0;
  EXPECT_THROW(SuffixProposer{o}, Error);
  o = {};
  o.min_token_prob = 1.5;
  EXPECT_THROW(SuffixProposer{o}, Error);
  o = {};
  o.max_spec_factor = -1;
  EXPECT_THROW(SuffixProposer{o}, Error);
  o = {};
  o.max_cached_tokens = -1;
  EXPECT_THROW(SuffixProposer{o}, Error);
}

}  // namespace
}  // namespace zen::spec
