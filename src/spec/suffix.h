// Suffix decoding (arXiv 2411.04975, as Snowflake's Arctic Inference does it): a model-free
// proposer for repetitive text. Each request keeps a depth-bounded trie of the substrings of
// its prompt and output (every substring of at most max_tree_depth tokens, with how often it
// occurs), built as tokens arrive; a global trie holds the outputs of recently finished
// requests. To draft, the sequence's last m tokens (for every m up to the depth) are looked up
// and the most frequent continuation is followed while the product of its empirical
// probabilities (child count / node count) stays above min_token_prob, for at most
// max_spec_factor * m + max_spec_offset tokens. Of all match lengths and both tries the draft
// with the highest score (sum of the path probabilities) wins. No distribution: q is empty.
//
// Cost, with D = max_tree_depth: appending a token is O(D) (one child lookup per substring
// that ends at it); a trie over n tokens has at most n x D nodes of 16 bytes (plus a sorted
// child list for the nodes that branch); a draft is O(D^2) lookups plus D greedy walks.
#pragma once
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "spec/proposer.h"

namespace zen::spec {

struct SuffixOptions {
  int32_t max_tree_depth = 24;           // longest substring indexed: bounds both match and draft
  double max_spec_factor = 1.0;          // draft at most factor x match length tokens ...
  double max_spec_offset = 0.0;          // ... plus this offset (can be negative)
  double min_token_prob = 0.1;           // stop drafting once the path probability falls below
  int64_t max_cached_tokens = 1 << 20;   // global trie's bound on finished outputs (0: no global trie)
  bool use_prompt = true;                // index the prompt in the request's trie, not only the output
};

// A candidate continuation and how likely the trie thinks it is.
struct SuffixDraft {
  std::vector<int32_t> tokens;
  double score = 0;        // sum over tokens of the path probability up to and including it
  int32_t match_len = 0;   // length of the context suffix it continues
};

// Depth-bounded trie of all substrings of the sequences put in it, with occurrence counts:
// node s counts the (start position) occurrences of s. Node 0 is the root (count: tokens).
class SuffixTree {
 public:
  explicit SuffixTree(int32_t max_depth);

  // Appends `token` to a sequence; `tail` holds the nodes of its substrings ending at its
  // last token (tail[k]: length k + 1) and is updated. Start a sequence with an empty tail.
  void append(std::vector<int32_t>& tail, int32_t token);
  // A whole sequence, and its exact undo (eviction): nodes whose count drops to 0 are freed.
  void insert(std::span<const int32_t> seq);
  void erase(std::span<const int32_t> seq);

  // Best draft continuing `context` (see the file comment); empty when nothing matches.
  SuffixDraft speculate(std::span<const int32_t> context, int32_t max_tokens, const SuffixOptions& o) const;

  int64_t num_nodes() const;  // not counting the root
  int64_t num_tokens() const { return nodes_[kRoot].count; }

 private:
  static constexpr int32_t kRoot = 0;
  static constexpr int32_t kNone = -1;
  struct Edge {
    int32_t token;
    int32_t node;
  };
  // 16 bytes: most nodes sit on unbranched paths and keep their one child inline.
  struct Node {
    int32_t count = 0;
    int32_t fan = kNone;         // index in fans_ when the node has two or more children
    Edge one{0, kNone};          // the only child otherwise (node kNone: a leaf)
  };

  int32_t find(int32_t node, int32_t token) const;
  std::span<const Edge> children(int32_t node) const;  // not the root's
  int32_t add_child(int32_t node, int32_t token);
  void remove_child(int32_t node, int32_t token);
  int32_t new_node();
  void free_subtree(int32_t node);
  void release_fan(int32_t fan);
  int32_t walk(std::span<const int32_t> s) const;  // node of string s, or kNone
  SuffixDraft follow(int32_t node, int32_t budget, double min_prob) const;

  int32_t max_depth_;
  std::vector<Node> nodes_{Node{}};
  std::vector<int32_t> free_nodes_;
  std::vector<std::vector<Edge>> fans_;  // sorted by token
  std::vector<int32_t> free_fans_;
  // The root's children: vocabulary-wide fan-out, where sorted insertion would be quadratic.
  std::unordered_map<int32_t, int32_t> root_children_;
};

struct SuffixStats {
  int64_t requests = 0;          // live per-request tries
  int64_t request_nodes = 0;     // nodes over all of them
  int64_t cached_requests = 0;   // finished outputs in the global trie
  int64_t cached_tokens = 0;     // their tokens (<= max_cached_tokens)
  int64_t global_nodes = 0;
};

// Not thread-safe: the engine calls it from its step loop.
class SuffixProposer : public Proposer {
 public:
  explicit SuffixProposer(const SuffixOptions& options);
  std::string_view name() const override { return "suffix"; }
  void propose(std::span<DraftSlot> slots) override;
  void observe(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len, int32_t drafted,
               int32_t accepted) override;
  void finish(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) override;

  SuffixStats stats() const;

 private:
  struct Request {
    explicit Request(int32_t depth) : tree(depth) {}
    SuffixTree tree;
    std::vector<int32_t> tail;    // SuffixTree::append's cursor
    int64_t begin = 0;            // first indexed position (0, or prompt_len without use_prompt)
    int64_t end = 0;              // tokens indexed so far: [begin, end)
    std::vector<int32_t> recent;  // the last (up to max_tree_depth) indexed tokens
  };

  Request& sync(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len);
  bool still_valid(const Request& r, std::span<const int32_t> tokens, int64_t begin) const;

  SuffixOptions o_;
  std::unordered_map<uint64_t, Request> requests_;
  SuffixTree global_;
  std::deque<std::vector<int32_t>> cached_;  // finished outputs in the global trie, oldest first
  int64_t cached_tokens_ = 0;
};

}  // namespace zen::spec
