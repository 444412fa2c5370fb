#include "engine/window_blocks.h"

#include <algorithm>

#include "base/error.h"

namespace zen {

WindowBlocks::WindowBlocks(int64_t num_blocks, int64_t target_blocks, int64_t block_size, int64_t window)
    : block_size_(block_size), window_(window) {
  if (num_blocks <= 0 || target_blocks <= 0 || block_size <= 0 || window <= 0)
    fail("window blocks: need positive sizes, got ", num_blocks, " blocks for ", target_blocks, " of ", block_size,
         " tokens, window ", window);
  block_of_.assign(static_cast<size_t>(target_blocks), -1);
  target_of_.assign(static_cast<size_t>(num_blocks), -1);
  first_row_.assign(static_cast<size_t>(num_blocks), 0);
  pinned_at_.assign(static_cast<size_t>(num_blocks), 0);
  last_use_.assign(static_cast<size_t>(num_blocks), 0);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t WindowBlocks::blocks_needed(int64_t window, int64_t block_size, int64_t max_seqs, int64_t max_step_tokens) {
  // Between steps each sequence's window - 1 rows span at most ceil((window - 1) / bs) + 1
  // blocks; a step's new tokens add at most one block per block_size of them and one per
  // sequence whose tokens start a block part way.
  const int64_t per_seq = (window - 1 + block_size - 1) / block_size + 1;
  return max_seqs * (per_seq + 1) + (max_step_tokens + block_size - 1) / block_size;
}

std::pair<int64_t, int64_t> WindowBlocks::block_range(int64_t from, int64_t to) const {
  from = std::max<int64_t>(from, 0);
  if (to <= from) return {1, 0};
  return {from / block_size_, (to - 1) / block_size_};
}

bool WindowBlocks::holds(std::span<const int32_t> target_blocks, int64_t i, int64_t from, int64_t to) const {
  const int64_t start = i * block_size_;
  from = std::max(from, start);
  to = std::min(to, start + block_size_);
  if (to <= from) return true;  // nothing of this block is read
  if (i >= static_cast<int64_t>(target_blocks.size())) return false;
  const int32_t target = target_blocks[static_cast<size_t>(i)];
  if (target < 0 || target >= static_cast<int32_t>(block_of_.size())) return false;
  const int32_t b = block_of_[static_cast<size_t>(target)];
  return b >= 0 && first_row_[static_cast<size_t>(b)] <= from - start;
}

void WindowBlocks::use(int32_t block) {
  uint64_t& last = last_use_[static_cast<size_t>(block)];
  if (last != 0) lru_.erase({last, block});
  pinned_at_[static_cast<size_t>(block)] = step_;
  last = ++clock_;
  lru_.insert({last, block});
}

void WindowBlocks::pin(std::span<const int32_t> target_blocks, int64_t computed) {
  const auto [first, last] = block_range(computed - window_ + 1, computed);
  for (int64_t i = first; i <= last && i < static_cast<int64_t>(target_blocks.size()); ++i) {
    const int32_t b = block_of_[static_cast<size_t>(target_blocks[static_cast<size_t>(i)])];
    if (b >= 0) use(b);
  }
}

int32_t WindowBlocks::map(int32_t target_block, int64_t first_row) {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    // Every block pinned in this step was used in it, after every block that was not: so the
    // least recently used block is unpinned unless all are pinned.
    if (lru_.empty() || pinned_at_[static_cast<size_t>(lru_.begin()->second)] == step_)
      fail("window KV pool: all ", num_blocks(), " blocks are pinned by running sequences' windows");
    b = lru_.begin()->second;
    lru_.erase(lru_.begin());
    last_use_[static_cast<size_t>(b)] = 0;
    block_of_[static_cast<size_t>(target_of_[static_cast<size_t>(b)])] = -1;
  }
  target_of_[static_cast<size_t>(b)] = target_block;
  block_of_[static_cast<size_t>(target_block)] = b;
  first_row_[static_cast<size_t>(b)] = static_cast<int32_t>(first_row);
  return b;
}

void WindowBlocks::table(std::span<const int32_t> target_blocks, int64_t pos, int64_t n, std::vector<int32_t>& out) {
  out.assign(target_blocks.size(), -1);
  const int64_t read_from = std::max<int64_t>(0, pos - window_ + 1);
  const auto [first, last] = block_range(read_from, pos + n);
  if (last >= static_cast<int64_t>(target_blocks.size()))
    fail("window table: ", pos + n, " positions need ", last + 1, " blocks, the table has ", target_blocks.size());
  for (int64_t i = first; i <= last; ++i) {
    const int32_t target = target_blocks[static_cast<size_t>(i)];
    if (target < 0 || target >= static_cast<int32_t>(block_of_.size())) fail("window table: block id ", target, " out of range");
    const int64_t start = i * block_size_;
    if (!holds(target_blocks, i, read_from, pos))
      fail("window KV: positions ", std::max(read_from, start), "..", std::min(pos, start + block_size_) - 1, " of block ",
           target, " left the window pool while a window still reads them");
    if (block_of_[static_cast<size_t>(target)] < 0) map(target, std::max<int64_t>(0, pos - start));  // written only
    const int32_t b = block_of_[static_cast<size_t>(target)];
    // Rows a slice writes are held from then on (a block's owner writes it in order, and reads
    // only rows it wrote; a prefix hit reads only full blocks).
    int32_t& first_row = first_row_[static_cast<size_t>(b)];
    first_row = std::min(first_row, static_cast<int32_t>(std::max<int64_t>(0, pos - start)));
    use(b);
    out[static_cast<size_t>(i)] = b;
  }
}

bool WindowBlocks::holds_window(std::span<const int32_t> target_blocks, int64_t cached) const {
  const int64_t from = std::max<int64_t>(0, cached - window_ + 1);
  const auto [first, last] = block_range(from, cached);
  for (int64_t i = first; i <= last; ++i)
    if (!holds(target_blocks, i, from, cached)) return false;
  return true;
}

int64_t WindowBlocks::blocks_pinned() const {
  return std::count(pinned_at_.begin(), pinned_at_.end(), step_);
}

int64_t WindowBlocks::blocks_held() const {
  return std::count_if(target_of_.begin(), target_of_.end(), [](int32_t t) { return t >= 0; });
}

}  // namespace zen
