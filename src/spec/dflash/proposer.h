// DFlash speculation in the engine: one drafter forward per step drafts a whole block for
// every sequence that asked (drafter.h).
//
// Context store. The full draft layers' context K/V live in a paged pool beside the target's
// KV, indexed by the target's own block ids: a token's row lives in the block that holds the
// token's target KV. So whatever shares or frees target blocks (prefix caching, preemption,
// abort) shares or frees the draft's rows with them, at no cost of its own; its memory is
// counted per token with the target's (kv_bytes_per_token). The sliding layers keep only their
// windows: a WindowStore (window_store.h) of a few blocks per sequence, mapped from the same
// target block ids, whose memory is fixed by --max-num-seqs whatever the context length
// (window_kv), and only rows inside a sequence's window are stored there.
//
// Lazy context. The rows that became final (commit(): prefill chunks, a verification's last
// token with its accepted drafts) are kept as the sequence's pending tapped rows, and projected
// into the store by the next propose() for the sequence, all drafting sequences in one batch:
// while the controller drafts nothing (low acceptance, a busy batch) the drafter costs nothing
// per step, and a catch-up of many rows is one wide, cheap projection. More than
// kMaxPendingRows pending rows (a long prompt) are projected in commit(), bounding memory. The
// price: a prefix-cache hit finds only the rows its first owner projected (it drafted after
// them); rows it never did are stale, which costs acceptance, never exactness.
//
// Drafting. A slot's context is its first tokens.size() - 1 positions; the block is
// [tokens.back(), mask x (B - 1)], always the trained width B (full layers see the whole block,
// so a narrower one would draft differently); the first max_tokens of its B - 1 drafts are
// returned, drawn as draft_sampling.h says (sampled requests get q); a DFlash 2 drafter's
// selector walks the block's positions from the anchor instead (q: its softmax over its
// candidates). The layers cost the same whatever k is taken from a block, but the output head
// runs only for the k rows that will be verified: cost_seconds = the layers (measured per
// number of sequences) + k head rows each.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/kv_cache.h"
#include "spec/controller.h"
#include "spec/dflash/drafter.h"
#include "spec/dflash/window_store.h"
#include "spec/draft_sampling.h"
#include "spec/proposer.h"

namespace zen::spec::dflash {

class DFlashProposer : public Proposer {
 public:
  static constexpr int64_t kMaxPendingRows = 256;  // per sequence, before commit() projects them
  static constexpr int64_t kUsualRows = 4;   // rows a drafting step projects: the decoded token, accepted drafts
  static constexpr int64_t kBulkRows = 32;   // projections at least this long measure the per-row cost

  DFlashProposer(Model& target, const std::string& folder, bool q8_0 = false);
  DFlashProposer(Model& target, std::unique_ptr<Drafter> drafter);

  const Drafter& drafter() const { return *drafter_; }
  std::string_view name() const override { return "dflash"; }
  int32_t max_draft_tokens() const override {
    return static_cast<int32_t>(std::min<int64_t>(drafter_->config().block_size - 1, kMaxDraftTokens));
  }
  std::span<const int32_t> tap_layers() const override { return drafter_->config().target_layer_ids; }
  void commit(std::span<const CommittedRows> rows, const float* taps) override;
  size_t kv_bytes_per_token() const override;  // the full draft layers' K and V, f32
  WindowKv window_kv(int64_t max_seqs, int64_t block_size) const override;  // the sliding layers' windows
  void reserve_kv_blocks(int64_t blocks, int64_t block_size, int64_t max_seqs) override;
  void propose(std::span<DraftSlot> slots) override;
  void finish(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) override;
  double cost_seconds(int64_t seqs, int32_t k) const override;
  // Pending rows beyond a step's usual few, at the measured per-row cost of a wide projection.
  double catch_up_seconds(uint64_t seq_id, std::span<const int32_t> tokens) const override;
  int64_t pending_rows(uint64_t seq_id) const;  // tests
  const WindowStore* window_store() const { return window_.get(); }  // tests; null without sliding layers

  // Seconds since start in the draft layers (embedding, convolutions and selector included),
  // the borrowed output head's rows, and the context K/V of committed rows; blocks drafted.
  std::vector<std::pair<std::string, double>> time_by_part() const override;

 private:
  // A sequence's context rows: 0 .. done-1 are in the store, the next ones pending.
  struct Context {
    int64_t done = 0;
    std::vector<float> taps;  // [pending rows, tap width]
  };
  int64_t pending_count(const Context& c) const;
  // Projects the pending rows of these sequences (blocks: each one's block table) into the
  // store, in one batch.
  void project(std::span<Context* const> contexts, std::span<const std::span<const int32_t>> blocks);
  // DFlash 2: fills s.draft (and q) with the selector's path over k positions.
  void select(DraftSlot& s, const float* hidden, const float* logits, int64_t k);

  Model& target_;
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<KvPool> store_;        // [full draft layer] K/V per target block (see above)
  std::unique_ptr<WindowStore> window_;  // [sliding draft layer] their windows; null: none
  std::unordered_map<uint64_t, DraftSampler> samplers_;  // sampled requests' draft streams
  std::unordered_map<uint64_t, Context> contexts_;
  std::map<int64_t, double> block_seconds_;  // layers: moving average by sequences per call
  double head_seconds_per_row_ = 0;          // the output head, per drafted row (moving average)
  double context_seconds_per_seq_ = 0;       // propose()'s projection, per drafting sequence
  double context_seconds_per_row_ = 0;       // projections of at least kBulkRows rows, per row
  double layer_seconds_ = 0, head_seconds_ = 0, context_seconds_ = 0;
  int64_t blocks_drafted_ = 0;

  // Per-call scratch, reused.
  std::vector<BlockJob> jobs_;
  std::vector<std::vector<int32_t>> blocks_;  // [jobs][B]
  std::vector<size_t> job_slot_;              // [jobs] slot index
  std::vector<Context*> pending_;             // drafting sequences with rows to project
  std::vector<std::span<const int32_t>> pending_blocks_;
  std::vector<float> logits_;                 // [jobs x (B - 1), vocab]
  std::vector<float> hidden_;                 // DFlash 2: [jobs x (B - 1), H] the selector's input
  std::vector<float> taps_;                   // [committed rows, tap width]
  std::vector<int64_t> positions_;            // [committed rows]
  std::vector<std::vector<float>> k_, v_;     // [layer][committed rows, kv_dim]
};

}  // namespace zen::spec::dflash
