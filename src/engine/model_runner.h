// Turns a scheduled step into one batched forward: a SeqSlice per sequence (its new tokens,
// position, block table, state slot) and one logits row per sequence (its last token).
#pragma once
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "model/model.h"

namespace zen {

class ModelRunner {
 public:
  ModelRunner(Model& model, KvPool& kv, StatePool* states) : model_(model), kv_(kv), states_(states) {}
  // Returns logits [plan.size(), vocab]: row i belongs to plan[i]'s last new token.
  float* run(std::span<const ScheduledSeq> plan);

 private:
  Model& model_;
  KvPool& kv_;
  StatePool* states_;
  std::vector<SeqSlice> slices_;
  std::vector<float> logits_;
};

}  // namespace zen
