// A proposer wrapper for tests: forwards everything to the real proposer and logs what it
// drafted, per sequence and context length, to compare with a reference.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "spec/proposer.h"

namespace zen::test {

// Per sequence id, the drafts proposed at each context length (tokens.size() of the slot).
struct DraftLog {
  std::map<uint64_t, std::map<size_t, std::vector<int32_t>>> by_seq;
};

class LoggedProposer : public spec::Proposer {
 public:
  LoggedProposer(std::unique_ptr<spec::Proposer> inner, DraftLog* log) : inner_(std::move(inner)), log_(log) {}
  std::string_view name() const override { return inner_->name(); }
  std::span<const int32_t> tap_layers() const override { return inner_->tap_layers(); }
  void commit(std::span<const spec::CommittedRows> rows, const float* taps) override { inner_->commit(rows, taps); }
  size_t kv_bytes_per_token() const override { return inner_->kv_bytes_per_token(); }
  void reserve_kv_blocks(int64_t blocks, int64_t block_size, int64_t max_seqs) override {
    inner_->reserve_kv_blocks(blocks, block_size, max_seqs);
  }
  WindowKv window_kv(int64_t max_seqs, int64_t block_size) const override { return inner_->window_kv(max_seqs, block_size); }
  int32_t max_draft_tokens() const override { return inner_->max_draft_tokens(); }
  double cost_seconds(int64_t seqs, int32_t k) const override { return inner_->cost_seconds(seqs, k); }
  double catch_up_seconds(uint64_t id, std::span<const int32_t> tokens) const override {
    return inner_->catch_up_seconds(id, tokens);
  }
  void observe(uint64_t id, std::span<const int32_t> tokens, int64_t prompt_len, int32_t drafted, int32_t accepted) override {
    inner_->observe(id, tokens, prompt_len, drafted, accepted);
  }
  void finish(uint64_t id, std::span<const int32_t> tokens, int64_t prompt_len) override {
    inner_->finish(id, tokens, prompt_len);
  }
  void propose(std::span<spec::DraftSlot> slots) override {
    inner_->propose(slots);
    for (const spec::DraftSlot& s : slots) log_->by_seq[s.seq_id][s.tokens.size()] = s.draft;
  }
  spec::Proposer& inner() { return *inner_; }

 private:
  std::unique_ptr<spec::Proposer> inner_;
  DraftLog* log_;
};

}  // namespace zen::test
