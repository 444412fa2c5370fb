// The step rank 0 broadcasts to the other ranks of a tensor-parallel model before each forward:
// the sequences' new tokens, positions, block tables and state slots, and the KV pool's shape
// (each rank keeps a pool of the same blocks holding its own KV heads). Sampling, scheduling,
// prefix caching and speculation stay on rank 0; the ranks only run the forward.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"

namespace zen::dist {

// Forward: a batch (encode_step). StateOp: a copy or zeroing of recurrent-state slots that
// rank 0's engine made between forwards (StateOp below), for the ranks to make in theirs.
// Embed, OutputHead, Mtp: what a drafter on rank 0 borrows from the split target (embedding
// rows of token ids, the vocabulary-parallel output head over hidden rows, the MTP head over a
// batch); every rank runs its share (model/tp_runtime.h, TpRuntime::lend).
enum class StepKind : uint32_t { Stop = 0, Forward = 1, StateOp = 2, Embed = 3, OutputHead = 4, Mtp = 5 };

struct StateOp {
  uint64_t pool_id = 0;  // which of rank 0's state pools
  int64_t num_slots = 0;
  int32_t src = -1, dst = -1;  // src -1: zero dst
};

// Fixed-size: what a waiting rank receives first.
struct StepHeader {
  StepKind kind = StepKind::Stop;
  uint32_t reserved = 0;
  uint64_t body_bytes = 0;
};

struct PoolShape {
  uint64_t id = 0;  // which of rank 0's pools (a new id: the ranks start a new pool)
  int64_t num_blocks = 0, block_size = 0;
  KvDType dtype = KvDType::F32;
  bool operator==(const PoolShape&) const = default;
};

std::vector<uint8_t> encode_step(const ForwardBatch& batch);

// A received step: its slices point into `body`, which it owns.
struct DecodedStep {
  std::vector<uint8_t> body;
  PoolShape pool;
  PoolShape window_pool;       // the sliding layers' pool (id 0: none; slices' window_blocks)
  uint64_t states_id = 0;      // rank 0's recurrent-state pool (0: none)
  int64_t states_slots = 0;
  bool argmax_only = false;
  std::vector<SeqSlice> seqs;
  std::span<const int32_t> tap_layers;  // a drafter's taps (whole-model layer indices)
};
// Throws zen::Error on a truncated or inconsistent body.
DecodedStep decode_step(std::vector<uint8_t> body);

}  // namespace zen::dist
