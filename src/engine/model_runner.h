// Turns a scheduled step into one batched forward: a SeqSlice per sequence (its new tokens,
// position, block table, state slot) and one logits row per sequence (its last token).
#pragma once
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "engine/window_blocks.h"
#include "model/model.h"

namespace zen {

// Hybrid models verifying drafts: the state after token i of a sequence's slice goes to
// draft_states[i] (i < drafts), the state after its last token to its own slot.
class ModelRunner {
 public:
  ModelRunner(Model& model, KvPool& kv, StatePool* states) : model_(model), kv_(kv), states_(states) {}
  // Returns logits [rows, vocab]: one row per plan entry (its last new token), or n_tokens
  // rows for entries with all_logits; first_row(i) says where plan[i]'s rows start.
  // running: every running sequence (with window KV, the windows of those not in the plan
  // stay pinned too).
  float* run(std::span<const ScheduledSeq> plan, std::span<Sequence* const> running = {});
  int64_t first_row(size_t i) const { return first_row_[i]; }
  // Target layers to capture on every forward (a DFlash proposer's taps); then taps() holds
  // [tokens, layers x hidden] for the last run, plan[i]'s tokens from row first_token(i).
  void set_tap_layers(std::span<const int32_t> layers) { tap_layers_ = layers; }
  const float* taps() const { return taps_.data(); }
  int64_t first_token(size_t i) const { return first_token_[i]; }
  void set_states(StatePool* states) { states_ = states; }
  // Sliding-window layers kept apart (ForwardBatch::window_kv): their pool and its blocks.
  void set_windows(KvPool* window_kv, WindowBlocks* windows) { window_kv_ = window_kv, windows_ = windows; }

 private:
  Model& model_;
  KvPool& kv_;
  StatePool* states_;
  std::vector<SeqSlice> slices_;
  std::vector<std::vector<int32_t>> histories_;
  KvPool* window_kv_ = nullptr;
  WindowBlocks* windows_ = nullptr;
  std::vector<std::vector<int32_t>> window_tables_;
  std::vector<int64_t> first_row_;
  std::vector<int64_t> first_token_;
  std::span<const int32_t> tap_layers_;
  std::vector<float> taps_;
  std::vector<float> logits_;
};

}  // namespace zen
