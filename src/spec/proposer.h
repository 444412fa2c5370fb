// What every speculative proposer offers the engine: draft up to k tokens that may follow a
// sequence, and learn what the verifier kept. One file per proposer (ngram, suffix,
// draft_model, mtp) behind this interface; the engine never knows which one it drives.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sampling/sampler.h"

namespace zen::spec {

// One sequence's request for a draft, and the answer.
struct DraftSlot {
  uint64_t seq_id = 0;
  std::span<const int32_t> tokens;  // prompt + output; tokens.back() is the token being decoded
  int64_t prompt_len = 0;
  int32_t max_tokens = 0;           // k chosen by the controller (> 0)
  const SamplingParams* sampling = nullptr;  // how the target samples (a draft model samples alike)
  // The target's block table: positions 0 .. tokens.size() - 2 are in its KV cache (and in a
  // proposer's store beside it, see reserve_kv_blocks).
  std::span<const int32_t> kv_blocks;
  // Out: at most max_tokens drafted tokens, and for proposers with a distribution the
  // probabilities each was drawn from ([draft.size(), vocab], row j for draft[j]); empty q
  // means a point mass on each drafted token.
  std::vector<int32_t> draft;
  std::vector<float> q;
};

// Rows of a target forward that became final: a sequence's positions pos .. pos + n - 1,
// whose tapped hidden states are rows row .. row + n - 1 of the step's tap buffer.
struct CommittedRows {
  uint64_t seq_id = 0;
  std::span<const int32_t> kv_blocks;  // the sequence's block table in the target's cache
  // The sequence's tokens at commit (prompt + output): the token after the last row, pos + n,
  // is among them (the next prompt token, or the one just sampled), which MTP needs.
  std::span<const int32_t> tokens;
  int64_t pos = 0, row = 0, n = 0;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string_view name() const = 0;
  // Drafts for several sequences at once (a draft model batches them in one forward). Slots
  // may come back with an empty draft (nothing worth proposing).
  virtual void propose(std::span<DraftSlot> slots) = 0;
  // After verification: tokens (prompt + output) are final up to the end; `accepted` of the
  // `drafted` tokens were kept. Proposers with per-sequence state (a suffix tree, draft KV)
  // bring it up to date here; tokens may also have shrunk (preemption) since the last call.
  virtual void observe(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len, int32_t drafted,
                       int32_t accepted) {
    (void)seq_id, (void)tokens, (void)prompt_len, (void)drafted, (void)accepted;
  }
  // The sequence finished (any reason): drop its state; `tokens` is its final text, which a
  // proposer with a cross-request memory (suffix) may learn from.
  virtual void finish(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) {
    (void)seq_id, (void)tokens, (void)prompt_len;
  }
  // Target layers whose output residual stream this proposer reads (DFlash's taps, MTP's last
  // layer); empty: none.
  // The engine then captures them on every forward and passes commit() the rows that became
  // final (prefill chunks; a verification's last token and its accepted drafts), in position
  // order, before anything could evict their blocks.
  virtual std::span<const int32_t> tap_layers() const { return {}; }
  // taps: [forward rows, tap_layers().size() * hidden].
  virtual void commit(std::span<const CommittedRows> rows, const float* taps) { (void)rows, (void)taps; }
  // KV the proposer keeps for each token the target caches (a draft model's own pool, a DFlash
  // drafter's context K/V), counted against the same memory budget; 0: none.
  virtual size_t kv_bytes_per_token() const { return 0; }
  // KV the proposer keeps in a bounded number of blocks whatever the context length (a DFlash
  // drafter's sliding layers keep their windows): bytes per token of such a block and the blocks
  // max_seqs sequences need. It never keeps more of them than the target's pool has blocks (they
  // are mapped from target blocks), and the budget charges it so.
  struct WindowKv {
    size_t bytes_per_token = 0;
    int64_t blocks = 0;
  };
  virtual WindowKv window_kv(int64_t max_seqs, int64_t block_size) const {
    (void)max_seqs, (void)block_size;
    return {};
  }
  // The target's pool once sized: the proposer allocates its own for as many tokens (and its
  // fixed KV for max_seqs sequences).
  virtual void reserve_kv_blocks(int64_t blocks, int64_t block_size, int64_t max_seqs) {
    (void)blocks, (void)block_size, (void)max_seqs;
  }
  // The most drafts one propose() can return per sequence (a DFlash block's B - 1); 0: no limit
  // of its own. num_speculative_tokens defaults to it and may not exceed it.
  virtual int32_t max_draft_tokens() const { return 0; }
  // Where the proposer's time went since start, by part (seconds; e.g. DFlash: draft layers,
  // the borrowed output head, context K/V), for reports; empty when it keeps no account.
  virtual std::vector<std::pair<std::string, double>> time_by_part() const { return {}; }
  // Seconds one propose() call costs for `seqs` sequences drafting `k` tokens each, as the
  // proposer measured it (0: negligible, e.g. lookups); the controller adds it to a step.
  virtual double cost_seconds(int64_t seqs, int32_t k) const {
    (void)seqs, (void)k;
    return 0;
  }
  // Seconds of one-off work drafting for this sequence would cost before its first draft,
  // beyond what cost_seconds covers (a draft model reading a prompt, or the output of a stretch
  // without drafts, into its cache); 0 when none.
  virtual double catch_up_seconds(uint64_t seq_id, std::span<const int32_t> tokens) const {
    (void)seq_id, (void)tokens;
    return 0;
  }
};

}  // namespace zen::spec
