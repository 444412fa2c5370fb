#include "spec/dflash/window_store.h"

#include <algorithm>

#include "base/error.h"

namespace zen::spec::dflash {

int64_t WindowStore::blocks_per_sequence(int64_t window, int64_t block_size) {
  // window - 1 rows starting at a block's last slot span the most blocks.
  return window <= 1 ? 0 : (window - 1 + block_size - 2) / block_size + 1;
}

size_t WindowStore::bytes(const ModelConfig& layers, int64_t window, int64_t block_size, int64_t max_seqs) {
  return KvPool::bytes_per_token(layers, KvDType::F32) * static_cast<size_t>(block_size) *
         static_cast<size_t>(blocks_per_sequence(window, block_size) * max_seqs);
}

WindowStore::WindowStore(const ModelConfig& layers, int64_t window, int64_t target_blocks, int64_t block_size,
                         int64_t max_seqs)
    : pool_(layers, std::max<int64_t>(1, std::min(blocks_per_sequence(window, block_size) * max_seqs, target_blocks)),
            KvDType::F32, block_size),
      window_(window),
      block_of_(static_cast<size_t>(target_blocks), -1),
      target_of_(static_cast<size_t>(pool_.num_blocks()), -1),
      last_use_(target_of_.size(), 0),
      stored_(target_of_.size() * static_cast<size_t>(block_size), 0) {
  if (max_seqs < 1) fail("DFlash window store: max_seqs must be positive, got ", max_seqs);
}

int32_t WindowStore::map(int32_t target_block) {
  ZEN_CHECK(target_block >= 0 && target_block < static_cast<int32_t>(block_of_.size()), "DFlash window store: target block ",
            target_block, " outside ", block_of_.size());
  int32_t& mine = block_of_[static_cast<size_t>(target_block)];
  if (mine >= 0) return mine;
  // A free block, else the least recently used one (linear: one allocation per block of rows).
  const auto oldest = std::min_element(last_use_.begin(), last_use_.end());
  const auto b = static_cast<int32_t>(oldest - last_use_.begin());
  if (const int32_t previous = target_of_[static_cast<size_t>(b)]; previous >= 0) block_of_[static_cast<size_t>(previous)] = -1;
  target_of_[static_cast<size_t>(b)] = target_block;
  std::fill_n(stored_.begin() + static_cast<ptrdiff_t>(b) * pool_.block_size(), pool_.block_size(), uint8_t{0});
  mine = b;
  return b;
}

void WindowStore::store(int32_t target_block, int64_t slot, std::span<const float* const> k,
                        std::span<const float* const> v) {
  ZEN_CHECK(static_cast<int64_t>(k.size()) == pool_.num_layers() && k.size() == v.size(), "DFlash window store: ", k.size(),
            " rows for ", pool_.num_layers(), " sliding layers");
  const int32_t b = map(target_block);
  last_use_[static_cast<size_t>(b)] = ++clock_;
  const int32_t table[1] = {b};
  for (int l = 0; l < static_cast<int>(k.size()); ++l) pool_.store(l, table, slot, k[static_cast<size_t>(l)], v[static_cast<size_t>(l)]);
  stored_[static_cast<size_t>(b * pool_.block_size() + slot)] = 1;
}

void WindowStore::touch(int32_t target_block) {
  if (target_block < 0 || target_block >= static_cast<int32_t>(block_of_.size())) return;
  if (const int32_t b = block_of_[static_cast<size_t>(target_block)]; b >= 0) last_use_[static_cast<size_t>(b)] = ++clock_;
}

int32_t WindowStore::held(int32_t target_block, int64_t slot) const {
  if (target_block < 0 || target_block >= static_cast<int32_t>(block_of_.size())) return -1;
  const int32_t b = block_of_[static_cast<size_t>(target_block)];
  return b >= 0 && stored_[static_cast<size_t>(b * pool_.block_size() + slot)] != 0 ? b : -1;
}

const float* WindowStore::k_row(int layer, int32_t target_block, int64_t slot, int64_t kv_head) const {
  const int32_t b = held(target_block, slot);
  int64_t stride = 0;
  return b < 0 ? nullptr : pool_.k_rows_f32(layer, b, slot, 1, kv_head, nullptr, &stride);
}

const float* WindowStore::v_row(int layer, int32_t target_block, int64_t slot, int64_t kv_head) const {
  const int32_t b = held(target_block, slot);
  int64_t stride = 0;
  return b < 0 ? nullptr : pool_.v_rows_f32(layer, b, slot, 1, kv_head, nullptr, &stride);
}

int64_t WindowStore::blocks_in_use() const {
  return std::count_if(target_of_.begin(), target_of_.end(), [](int32_t t) { return t >= 0; });
}

}  // namespace zen::spec::dflash
