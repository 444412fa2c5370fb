#include "engine/state_cache.h"

#include "base/error.h"

namespace zen {

StateCache::StateCache(int64_t floats_per_slot, int64_t live_slots, int64_t snapshot_slots, int64_t scratch_slots)
    : pool_(floats_per_slot, live_slots + snapshot_slots + scratch_slots) {
  for (int64_t i = live_slots - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
  for (int64_t i = live_slots + snapshot_slots - 1; i >= live_slots; --i) snapshot_free_.push_back(static_cast<int32_t>(i));
  const int64_t first_scratch = live_slots + snapshot_slots;
  for (int64_t i = first_scratch + scratch_slots - 1; i >= first_scratch; --i) scratch_free_.push_back(static_cast<int32_t>(i));
}

void StateCache::take_scratch(int64_t n, std::vector<int32_t>& out) {
  for (int64_t i = 0; i < n && !scratch_free_.empty(); ++i) {
    out.push_back(scratch_free_.back());
    scratch_free_.pop_back();
  }
}

void StateCache::return_scratch(std::span<const int32_t> slots) { scratch_free_.insert(scratch_free_.end(), slots.begin(), slots.end()); }

int32_t StateCache::allocate() {
  if (free_.empty()) return -1;
  const int32_t slot = free_.back();
  free_.pop_back();
  pool_.zero(slot);
  return slot;
}

void StateCache::release(int32_t slot) {
  if (slot >= 0) free_.push_back(slot);
}

void StateCache::save_snapshot(uint64_t hash, int32_t live_slot) {
  auto it = by_hash_.find(hash);
  if (it != by_hash_.end()) {  // refresh: same prefix, same state
    lru_.splice(lru_.end(), lru_, it->second.lru_pos);
    return;
  }
  int32_t slot;
  if (!snapshot_free_.empty()) {
    slot = snapshot_free_.back();
    snapshot_free_.pop_back();
  } else if (!lru_.empty()) {
    auto victim = by_hash_.find(lru_.front());
    slot = victim->second.slot;
    by_hash_.erase(victim);
    lru_.pop_front();
  } else {
    return;  // no snapshot slots configured
  }
  pool_.copy(live_slot, slot);
  by_hash_[hash] = Snapshot{slot, lru_.insert(lru_.end(), hash)};
}

bool StateCache::restore_snapshot(uint64_t hash, int32_t live_slot) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return false;
  pool_.copy(it->second.slot, live_slot);
  lru_.splice(lru_.end(), lru_, it->second.lru_pos);
  return true;
}

}  // namespace zen
