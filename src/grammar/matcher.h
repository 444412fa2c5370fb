// The token-level matcher: which tokens a grammar allows next (a bitmask over the
// vocabulary), advancing on the chosen token, rolling back, and whether the output may end.
//
// A configuration is a set of pushdown stacks (persistent, shared tails) whose top states can
// consume a byte. The mask for a stack whose top is state s splits the vocabulary three ways,
// computed once per state by walking the vocabulary trie from s alone (xgrammar's idea):
// tokens that s's rule accepts without finishing (allowed whatever lies below), tokens it
// rejects, and the few that finish the rule partway (uncertain: checked against the real
// stack, sharing prefixes between consecutive tokens). Where s's rule is short (one
// character of a long counted string), almost every token finishes it, so the walk starts
// from s over the state below it instead.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocabulary.h"

namespace zen::grammar {

// A grammar bound to a vocabulary, with the per-state token classification shared by every
// matcher of it (thread-safe).
class CompiledGrammar {
 public:
  CompiledGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab);
  const Grammar& grammar() const { return *grammar_; }
  const Vocabulary& vocab() const { return *vocab_; }

  // Classes of tokens from a stack whose top is `state` (with `below`, the return state
  // under it, when state's rule is short; else -1): computed (or shared) on first use.
  const TokenClasses& masks(int32_t state, int32_t below = -1) const;
  // Computes every state's masks now (for timing compile and first mask apart).
  void precompute() const;
  // Tokens of this many bytes or more are always checked against the stack: the classes of
  // a state depend on the grammar this far ahead only, so more states share them.
  static constexpr int kClassDepth = 32;

 private:
  TokenClasses classify(int32_t state, int32_t below) const;
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  mutable std::mutex mu_;
  mutable std::unordered_map<uint64_t, std::shared_ptr<const TokenClasses>> masks_;  // (below, state)
};

struct Level;  // matcher.cc: a set of stacks while bytes are stepped

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Bit t of words set = token t allowed next; words has (vocab size + 63) / 64 entries.
  void fill_mask(std::span<uint64_t> words) const;
  // Whether token is allowed next (one check, for drafts).
  bool allows(int32_t token) const;
  // Consumes an allowed token; false (and no change) for a token the grammar forbids.
  bool advance(int32_t token);
  // How many leading tokens of a draft the grammar allows in sequence (checked by advancing
  // and rolling back: the matcher ends where it started).
  size_t allowed_prefix(std::span<const int32_t> tokens);
  // Undoes the last n advances.
  void rollback(int32_t n);
  int32_t num_advanced() const { return static_cast<int32_t>(history_.size()) - 1; }
  // The grammar may end here (stop tokens are allowed).
  bool accepting() const { return history_.back().accepting; }
  // Nothing but a stop token is allowed.
  bool terminated() const { return history_.back().stacks.empty(); }
  const CompiledGrammar& compiled() const { return *grammar_; }

 private:
  struct Config {
    std::vector<int32_t> stacks;  // persistent node ids, each a stack whose top consumes bytes
    bool accepting = false;
  };
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<Config> history_;  // [0] = start
  // Persistent stack nodes (state, parent): a frame's state and the node below it.
  struct Node {
    int32_t state, parent;
  };
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  int32_t intern(int32_t state, int32_t parent);
  // A level's stacks as a configuration of persistent nodes.
  Config commit(const Level& level);
  friend class Runner;
};

}  // namespace zen::grammar
