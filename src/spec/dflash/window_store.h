// Context K/V of a drafter's sliding layers, bounded by their window rather than by the context.
//
// A sliding layer's next block reads only the window - 1 positions before its anchor, so a
// sequence needs at most ceil((window - 1) / block) + 1 blocks of them at once, whatever its
// length. The store is a paged pool of that many blocks per sequence (max_seqs of them), mapped
// from the target's block ids as rows are stored: a row still lives where the token's target KV
// lives, so a warm prefix finds what its first owner projected, as the full layers' store does.
// When every block is mapped, the least recently used one is recycled (a finished sequence's, a
// cached prefix's, one left behind a window); its rows then read as missing, and so does a row
// never stored, instead of as whatever the memory held: missing rows cost acceptance, never
// exactness.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"

namespace zen::spec::dflash {

class WindowStore {
 public:
  // layers: the sliding layers alone, as a config (DrafterConfig::kv_config(true));
  // window: the widest of their windows; target_blocks: the target pool's block count (the
  // store never needs more blocks than that: each maps one).
  WindowStore(const ModelConfig& layers, int64_t window, int64_t target_blocks, int64_t block_size, int64_t max_seqs);

  // Blocks one sequence reads at most, and their bytes for max_seqs sequences.
  static int64_t blocks_per_sequence(int64_t window, int64_t block_size);
  static size_t bytes(const ModelConfig& layers, int64_t window, int64_t block_size, int64_t max_seqs);

  int64_t num_blocks() const { return static_cast<int64_t>(target_of_.size()); }
  int64_t block_size() const { return pool_.block_size(); }
  int64_t window() const { return window_; }

  // Stores one position's K and V rows ([kv_heads * head_dim] each) of every sliding layer
  // (k[l], v[l]: layer l's row) in the block mapped to target_block, mapping one first.
  void store(int32_t target_block, int64_t slot, std::span<const float* const> k, std::span<const float* const> v);
  // Marks target_block's rows as just used (a sequence's window, before it is read).
  void touch(int32_t target_block);
  // One row of a sliding layer (its index among the sliding layers), one KV head: head_dim
  // floats, or nullptr when the store does not hold it.
  const float* k_row(int layer, int32_t target_block, int64_t slot, int64_t kv_head) const;
  const float* v_row(int layer, int32_t target_block, int64_t slot, int64_t kv_head) const;
  int64_t blocks_in_use() const;  // mapped blocks (tests)

 private:
  int32_t map(int32_t target_block);  // the block for target_block, recycling the oldest if none is free
  int32_t held(int32_t target_block, int64_t slot) const;  // the physical block, -1 if the row is missing

  KvPool pool_;                        // [sliding layer] over num_blocks() blocks
  int64_t window_;
  std::vector<int32_t> block_of_;      // [target block] -> store block, -1: none
  std::vector<int32_t> target_of_;     // [store block] -> target block, -1: free
  std::vector<uint64_t> last_use_;     // [store block] clock of its last store or touch
  std::vector<uint8_t> stored_;        // [store block * block_size + slot] the row was stored
  uint64_t clock_ = 0;
};

}  // namespace zen::spec::dflash
