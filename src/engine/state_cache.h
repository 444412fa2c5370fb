// Recurrent-state slots of hybrid models, managed like KV blocks: each running sequence owns
// a live slot; prefix snapshots (the state after a cached prefix, keyed by the chain hash of
// its last block) live in the remaining slots, bounded, evicted least recently used.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/state_cache.h"

namespace zen {

class StateCache {
 public:
  // live_slots: sequences that can run at once; snapshot_slots: prefix snapshots kept;
  // scratch_slots: states after each drafted token while speculation is verified.
  StateCache(int64_t floats_per_slot, int64_t live_slots, int64_t snapshot_slots, int64_t scratch_slots = 0);

  StatePool& pool() { return pool_; }
  int64_t free_live() const { return static_cast<int64_t>(free_.size()); }
  int64_t snapshots() const { return static_cast<int64_t>(by_hash_.size()); }

  // A zeroed live slot, or -1 when all are taken.
  int32_t allocate();
  void release(int32_t slot);
  // Copies the live state into a snapshot slot for `hash` (replacing the LRU one when full).
  void save_snapshot(uint64_t hash, int32_t live_slot);
  // Restores the snapshot for `hash` into the live slot; false when there is none.
  bool restore_snapshot(uint64_t hash, int32_t live_slot);
  bool has_snapshot(uint64_t hash) const { return by_hash_.count(hash) != 0; }
  // Up to n scratch slots appended to out (fewer when short); give them back when done.
  void take_scratch(int64_t n, std::vector<int32_t>& out);
  void return_scratch(std::span<const int32_t> slots);
  int64_t free_scratch() const { return static_cast<int64_t>(scratch_free_.size()); }

 private:
  StatePool pool_;
  std::vector<int32_t> free_;                // live slots not in use
  std::vector<int32_t> snapshot_free_;       // snapshot slots not holding one
  std::vector<int32_t> scratch_free_;        // speculation scratch slots not in use
  std::list<uint64_t> lru_;                  // front: least recently used snapshot
  struct Snapshot {
    int32_t slot;
    std::list<uint64_t>::iterator lru_pos;
  };
  std::unordered_map<uint64_t, Snapshot> by_hash_;
};

}  // namespace zen
