// Recurrent state of hybrid (linear-attention) layers, per sequence, in slots: the serving
// engine allocates, frees, copies (prefix snapshots, speculative rollback) and batches them.
// A slot is a flat f32 array whose layout only the model knows (for Gated DeltaNet: per linear
// layer the conv1d window [kernel - 1, conv_dim] (oldest input first) then the delta-rule
// state [Hv, Dk, Dv]; see model/gated_delta_net.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/aligned.h"
#include "model/config.h"

namespace zen {

class StatePool {
 public:
  StatePool(int64_t floats_per_slot, int64_t num_slots);  // slots start zeroed on first use: call zero()
  int64_t num_slots() const { return num_slots_; }
  int64_t floats_per_slot() const { return floats_per_slot_; }
  size_t bytes_per_slot() const { return static_cast<size_t>(floats_per_slot_) * sizeof(float); }
  float* slot(int32_t i);
  const float* slot(int32_t i) const;
  void zero(int32_t i);
  void copy(int32_t src, int32_t dst);
  // Tensor parallelism: rank 0's model watches its pool so that copies and zeroings made
  // between forwards (prefix snapshots, speculative rollback) reach the other ranks' pools.
  // Called before the operation; src -1 means zero(dst).
  std::function<void(int32_t src, int32_t dst)> observer;
  const void* observer_owner = nullptr;  // who installed it

 private:
  int64_t floats_per_slot_, num_slots_;
  int64_t stride_;  // floats from slot to slot: whole cache lines, so every slot starts on one
  // Uninitialised until a slot is zeroed or copied into: a large pool (a Zen6 state is ~150 MiB
  // per sequence) commits memory only for the slots in use. Cache-line aligned.
  AlignedFloats data_;
};

// f32 values per sequence a config's recurrent layers need (0 for models without them).
int64_t recurrent_state_floats(const ModelConfig& cfg);

}  // namespace zen
