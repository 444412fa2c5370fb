// MTP speculation: the checkpoint's own multi-token-prediction head (Qwen3.5 / 3.6 / Next,
// HybridModel::mtp_forward) drafts k tokens per sequence by running its one layer k times, as
// vLLM's MTP proposer does.
//
// What the head reads. Row i of the head takes the target's final-normed hidden state h_i and
// the next token t_{i+1}, runs its layer at position i (its own KV), and predicts t_{i+2}. The
// engine taps the residual stream after the target's last layer for every row it computes;
// commit() keeps the rows that became final, final-normed, as the sequence's pending rows.
// Their K/V are written lazily, by the next propose() for the sequence, in the same forward
// that yields its first draft (vLLM's "catch-up"): when the controller drafts nothing for a
// while, the head costs nothing per step. A sequence whose pending rows pass kMaxPendingRows
// is caught up in commit() instead (one batched forward), so memory stays bounded.
//
// Drafting, for a sequence of n tokens (positions 0 .. n-2 in the target's cache, t_{n-1}
// being decoded):
//   step 1: the pending rows, through position n-2 with next tokens up to t_{n-1}; the output
//           of row n-2 (norm(x), the head's hidden) through the target's lm_head is draft d_1;
//   step j: one row at position n-3+j: that hidden and token d_{j-1} give d_j.
// All slots of a call run each step in one batched forward. Draws follow draft_sampling.h
// (greedy: the argmax; sampled: q from the request's temperature / top-k / top-p / min-p).
//
// Head KV. A one-layer pool (mtp_kv_config, f32) indexed by the target's block ids, like the
// DFlash context store: a committed row lives in the block that holds the token's target KV,
// so preemption and abort free it with the target's, and a prefix-cache hit finds the rows its
// first owner wrote. Two approximations, which cost acceptance, never exactness (verification
// decides): a cached block's last row was written with its first owner's next token, and rows
// its owner never caught up (it stopped drafting, or finished) are stale. Steps 2..k write
// speculative rows at positions n-1 .. n-3+k, into the sequence's own last block (not yet full,
// so never shared) and past the block table into scratch blocks beyond the target's count;
// the next catch-up overwrites them. When scratch runs short, a slot drafts fewer tokens.
// Not thread-safe: the head runs on the target's own buffers (mtp_forward), which is fine
// because the engine thread alone drives the target and its proposer.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/hybrid.h"
#include "model/kv_cache.h"
#include "spec/draft_sampling.h"
#include "spec/proposer.h"

namespace zen::spec {

class MtpProposer : public Proposer {
 public:
  static constexpr int64_t kMaxPendingRows = 256;  // per sequence, before commit() catches up
  static constexpr int64_t kScratchSequences = 64;  // sequences drafting past their blocks per call
  static constexpr int64_t kUsualRows = 4;   // catch-up rows of a drafting step: the decoded token, accepted drafts
  static constexpr int64_t kBulkRows = 32;   // catch-ups at least this long measure the per-row cost

  // Throws zen::Error unless target is a hybrid model whose MTP head loaded, naming
  // mtp.fc.weight (or its GGUF counterpart) when the head is absent or incomplete.
  explicit MtpProposer(Model& target);

  std::string_view name() const override { return "mtp"; }
  std::span<const int32_t> tap_layers() const override { return tap_layer_; }
  void commit(std::span<const CommittedRows> rows, const float* taps) override;
  size_t kv_bytes_per_token() const override;  // the head's layer, K and V, f32
  void reserve_kv_blocks(int64_t blocks, int64_t block_size, int64_t max_seqs) override;
  void propose(std::span<DraftSlot> slots) override;
  void finish(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) override;
  // k head steps for `seqs` sequences: k x (a forward of seqs rows + seqs output-head rows),
  // as measured (first steps with their usual few catch-up rows included; before any, the
  // per-row cost of a long catch-up stands in); 0 before anything was measured.
  double cost_seconds(int64_t seqs, int32_t k) const override;
  // Pending rows beyond a step's usual few, at the measured per-row cost of a catch-up.
  double catch_up_seconds(uint64_t seq_id, std::span<const int32_t> tokens) const override;
  // Seconds in the head's layer (catch-up and draft steps) and in the output head's rows; calls
  // that drafted.
  std::vector<std::pair<std::string, double>> time_by_part() const override;

  // Introspection (tests).
  int64_t pending_rows(uint64_t seq_id) const;
  int64_t scratch_blocks() const { return pool_ ? pool_->num_blocks() - target_blocks_ : 0; }

 private:
  struct SeqState {
    int64_t done = 0;             // rows 0 .. done-1 have their K/V in the pool
    std::vector<float> pending;   // [rows done .., H] final-normed target hidden, not yet run
    std::vector<float> last;      // [H] the head's output at row done-1 (draft 1's lm_head input)
    DraftSampler sampler;
  };
  // One slot's work in a propose() call.
  struct Work {
    size_t slot = 0;
    SeqState* st = nullptr;
    int32_t k = 0;                 // drafts wanted (cut to the scratch it got)
    std::vector<int32_t> blocks;   // target block table + scratch blocks
  };
  // Runs the head over slices (hidden: [their rows, H]) with no output head; returns seconds.
  double run_head(std::span<const SeqSlice> slices, const float* hidden);
  // Writes st's pending rows (next tokens from tokens, blocks from the table); keeps the last
  // row's output in st.last. One forward for all given sequences; returns its seconds.
  double catch_up(std::span<SeqState* const> states, std::span<const std::span<const int32_t>> tokens,
                std::span<const std::span<const int32_t>> blocks);
  int64_t pending_count(const SeqState& st) const { return static_cast<int64_t>(st.pending.size()) / H_; }

  HybridModel& target_;
  int64_t H_ = 0, V_ = 0;
  std::vector<int32_t> tap_layer_;  // {last layer}
  std::unique_ptr<KvPool> pool_;    // [1 layer] target blocks, then scratch
  int64_t target_blocks_ = 0;
  std::unordered_map<uint64_t, SeqState> seqs_;

  // Measured: head forwards by slice count (moving averages), output head per row, catch-up
  // seconds per row (forwards of at least kBulkRows rows).
  std::map<int64_t, double> step_seconds_;
  double head_seconds_per_row_ = 0, catch_up_seconds_per_row_ = 0;
  double layer_seconds_ = 0, head_seconds_ = 0;
  int64_t calls_ = 0;  // propose() calls that drafted

  // Per-call scratch, reused.
  std::vector<Work> work_;
  std::vector<SeqSlice> slices_;
  std::vector<float> hidden_;   // [rows, H] head inputs
  std::vector<float> normed_;   // [rows, H]
  std::vector<float> logits_;   // [slots, V]
  std::vector<std::vector<int32_t>> next_;  // [slices] tokens fed
};

}  // namespace zen::spec
