#include "engine/block_manager.h"

#include <algorithm>

#include "base/error.h"

namespace zen {

uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  // FNV-1a over the parent hash and the token ids, then a final avalanche (splitmix64).
  uint64_t h = 1469598103934665603ull ^ parent;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_cache)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_cache_(prefix_cache) {
  if (num_blocks <= 0 || block_size <= 0) fail("block manager needs positive sizes: ", num_blocks, " x ", block_size);
  const auto n = static_cast<size_t>(num_blocks);
  refs_.assign(n, 0);
  free_pos_.resize(n);
  in_free_.assign(n, true);
  meta_.resize(n);
  for (int32_t b = 0; b < static_cast<int32_t>(num_blocks); ++b) free_pos_[static_cast<size_t>(b)] = free_.insert(free_.end(), b);
}

void BlockManager::unlink_free(int32_t block) {
  const auto i = static_cast<size_t>(block);
  ZEN_CHECK(in_free_[i], "block ", block, " is not free");
  free_.erase(free_pos_[i]);
  in_free_[i] = false;
}

int32_t BlockManager::take_free() {
  ZEN_CHECK(!free_.empty(), "no free block");
  const int32_t b = free_.front();
  unlink_free(b);
  CachedBlock& m = meta_[static_cast<size_t>(b)];
  if (m.registered) {
    auto it = by_hash_.find(m.hash);
    if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
    m.registered = false;
    m.tokens.clear();
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

BlockManager::PrefixMatch BlockManager::match_prefix(std::span<const int32_t> tokens) const {
  PrefixMatch match;
  if (!prefix_cache_) return match;
  uint64_t parent = 0;
  const auto bs = static_cast<size_t>(block_size_);
  for (size_t start = 0; start + bs <= tokens.size(); start += bs) {
    const auto block_tokens = tokens.subspan(start, bs);
    const uint64_t h = block_hash(parent, block_tokens);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    const CachedBlock& m = meta_[static_cast<size_t>(it->second)];
    if (!std::equal(m.tokens.begin(), m.tokens.end(), block_tokens.begin(), block_tokens.end())) break;
    match.blocks.push_back(it->second);
    match.hashes.push_back(h);
    parent = h;
  }
  return match;
}

void BlockManager::acquire(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    const auto i = static_cast<size_t>(b);
    ZEN_CHECK(b >= 0 && b < num_blocks_, "block ", b);
    if (in_free_[i]) unlink_free(b);  // a cached block nobody referenced: back in use
    ++refs_[i];
  }
}

bool BlockManager::grow(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t need = blocks_for(tokens) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > num_free()) return false;
  for (int64_t i = 0; i < need; ++i) table.push_back(take_free());
  return true;
}

void BlockManager::release(std::vector<int32_t>& table) {
  // Last block first, so a sequence's tail is reused before its (more shareable) head.
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const auto i = static_cast<size_t>(*it);
    ZEN_CHECK(refs_[i] > 0, "releasing block ", *it, " with no reference");
    if (--refs_[i] == 0) {
      // Registered blocks stay findable until reused; unregistered ones are reused first.
      if (meta_[i].registered) free_pos_[i] = free_.insert(free_.end(), *it);
      else free_pos_[i] = free_.insert(free_.begin(), *it);
      in_free_[i] = true;
    }
  }
  table.clear();
}

void BlockManager::shrink(std::vector<int32_t>& table, int64_t tokens) {
  const auto keep = static_cast<size_t>(blocks_for(tokens));
  if (keep >= table.size()) return;
  std::vector<int32_t> tail(table.begin() + static_cast<std::ptrdiff_t>(keep), table.end());
  table.resize(keep);
  release(tail);
}

uint64_t BlockManager::register_full(int32_t block, uint64_t parent, std::span<const int32_t> tokens) {
  ZEN_CHECK(static_cast<int64_t>(tokens.size()) == block_size_, "register_full with ", tokens.size(), " tokens");
  const uint64_t h = block_hash(parent, tokens);
  if (!prefix_cache_) return h;
  CachedBlock& m = meta_[static_cast<size_t>(block)];
  if (m.registered) return m.hash;  // already known (a shared prefix block)
  if (by_hash_.count(h) != 0) return h;  // same content cached in another block: keep that one
  m.hash = h;
  m.registered = true;
  m.tokens.assign(tokens.begin(), tokens.end());
  by_hash_[h] = block;
  return h;
}

}  // namespace zen
