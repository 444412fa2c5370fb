// Which blocks of the window pool hold the sliding-window layers' K/V of which sequence.
//
// A sliding layer reads only the window - 1 positions before each new token, so the engine
// keeps those layers' K/V in a pool of their own (ForwardBatch::window_kv) sized by the
// window, not by the context: a running sequence holds at most ceil((window - 1) / block) + 1
// blocks there between steps, plus what a step writes. The other layers stay in the main pool.
//
// A window block mirrors one main-pool block (the same logical block of the same tokens), so
// the prefix cache keeps working: a cached prefix is usable when the blocks its window needs
// are still held. Blocks a running sequence's window still covers are pinned for the step;
// every other held block (behind a window, or a finished sequence's) is recycled least
// recently used first when a block is needed. Reading a row that is not held is an error,
// never a silent wrong answer.
#pragma once
#include <cstdint>
#include <set>
#include <span>
#include <utility>
#include <vector>

namespace zen {

class WindowBlocks {
 public:
  // num_blocks: the window pool's blocks; target_blocks: the main pool's (ids mirrored);
  // window: the widest sliding window of the model.
  WindowBlocks(int64_t num_blocks, int64_t target_blocks, int64_t block_size, int64_t window);

  // Window blocks max_seqs running sequences hold at most in a step of max_step_tokens tokens.
  static int64_t blocks_needed(int64_t window, int64_t block_size, int64_t max_seqs, int64_t max_step_tokens);

  int64_t num_blocks() const { return static_cast<int64_t>(target_of_.size()); }
  int64_t window() const { return window_; }

  // A step begins: every pin of the last step is released.
  void begin_step() { ++step_; }
  // A running sequence whose next token is at position `computed` (target_blocks: its main
  // table): pins the blocks its window reads, [computed - window + 1, computed).
  void pin(std::span<const int32_t> target_blocks, int64_t computed);
  // The window table of a slice writing positions [pos, pos + n): target_blocks' length, the
  // window block of every logical block from the first token's window on (mapped for the
  // blocks it writes), -1 before. Throws when a row the slice reads is not held.
  void table(std::span<const int32_t> target_blocks, int64_t pos, int64_t n, std::vector<int32_t>& out);
  // Whether a sequence whose first `cached` tokens come from the prefix cache (their blocks
  // target_blocks) finds every row its window reads next held.
  bool holds_window(std::span<const int32_t> target_blocks, int64_t cached) const;

  int64_t blocks_pinned() const;  // in this step
  int64_t blocks_held() const;    // mapped to a main-pool block

 private:
  // Logical blocks [first, last] of the rows [from, to) (first > last when empty).
  std::pair<int64_t, int64_t> block_range(int64_t from, int64_t to) const;
  // Whether rows [from, to) of logical block i are held (from, to: positions).
  bool holds(std::span<const int32_t> target_blocks, int64_t i, int64_t from, int64_t to) const;
  int32_t map(int32_t target_block, int64_t first_row);  // a free block, else the least recently used unpinned
  void use(int32_t block);

  int64_t block_size_, window_;
  std::vector<int32_t> block_of_;    // [main-pool block] -> window block, -1: none
  std::vector<int32_t> target_of_;   // [window block] -> main-pool block, -1: free
  std::vector<int32_t> first_row_;   // [window block] first slot stored since it was mapped
  std::vector<uint64_t> pinned_at_;  // [window block] step it was last pinned in
  std::vector<uint64_t> last_use_;   // [window block] clock of its last pin, 0: not in lru_
  std::set<std::pair<uint64_t, int32_t>> lru_;  // held blocks by (last_use_, block), oldest first
  std::vector<int32_t> free_;
  uint64_t step_ = 1, clock_ = 0;
};

}  // namespace zen
