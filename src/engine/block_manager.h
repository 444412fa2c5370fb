// Paged KV bookkeeping: which physical blocks a sequence's tokens live in, reference counts,
// and the prefix cache. A full block is identified by a chain hash (hash of the parent
// block's hash and this block's token ids); token ids are compared on every hit, so a hash
// collision can never serve wrong KV. Unreferenced blocks keep their contents and hash in an
// LRU free list and are only forgotten when the allocator reuses them.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace zen {

// Chain hash of one full block (parent: the previous block's hash, 0 for the first).
uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_cache);

  int64_t block_size() const { return block_size_; }
  bool prefix_cache() const { return prefix_cache_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks_ - num_free(); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // The longest run of cached full blocks that starts the token sequence: their ids (not yet
  // referenced) and, per block, the chain hash up to and including it.
  struct PrefixMatch {
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;
  };
  PrefixMatch match_prefix(std::span<const int32_t> tokens) const;

  // Takes a reference on each block of a match (the first n of it) for a new sequence.
  void acquire(std::span<const int32_t> blocks);
  // Grows a block table to hold `tokens` tokens; false (table unchanged) when the pool lacks
  // free blocks.
  bool grow(std::vector<int32_t>& table, int64_t tokens);
  // Releases every block of a table (finish, abort, preemption).
  void release(std::vector<int32_t>& table);
  // Drops the blocks past `tokens` tokens (speculative rollback, truncation).
  void shrink(std::vector<int32_t>& table, int64_t tokens);
  // Records that block `block` is full and holds `tokens` after the chain `parent`; makes it
  // findable by match_prefix. Returns its chain hash.
  uint64_t register_full(int32_t block, uint64_t parent, std::span<const int32_t> tokens);

  int32_t ref_count(int32_t block) const { return refs_[static_cast<size_t>(block)]; }
  int64_t cached_blocks() const { return static_cast<int64_t>(by_hash_.size()); }

 private:
  int32_t take_free();       // pops the least recently freed block, forgetting its hash
  void unlink_free(int32_t block);
  int64_t num_blocks_, block_size_;
  bool prefix_cache_;
  std::vector<int32_t> refs_;
  std::list<int32_t> free_;  // LRU order: front is reused first
  std::vector<std::list<int32_t>::iterator> free_pos_;
  std::vector<bool> in_free_;
  struct CachedBlock {
    uint64_t hash = 0;
    bool registered = false;
    std::vector<int32_t> tokens;
  };
  std::vector<CachedBlock> meta_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

}  // namespace zen
