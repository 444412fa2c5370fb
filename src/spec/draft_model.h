// Draft-model speculation: a smaller model of the same family, with the same vocabulary,
// drafts k tokens per sequence by running its own greedy or sampled decode ahead of the target.
//
// Draft KV. The draft keeps its own paged KV pool (reserve_kv sizes it; the engine gives it the
// target pool's token capacity) with a free list of blocks. Per sequence (keyed by seq_id) it
// remembers the block table and the tokens whose K/V are in that table, positions 0, 1, ...
//
// Implicit rollback. propose() compares the remembered tokens with the slot's tokens and keeps
// only their common prefix (at most tokens.size() - 1, so the token being decoded always runs):
// rejected drafts, a bonus token the draft never saw, a preemption that shrank the sequence, all
// come out as a shorter prefix, and blocks past it go back to the free list. No observe() needed.
//
// Batched catch-up. One batched forward feeds every slot its missing tokens (usually the
// decoded token plus the accepted drafts; the first time the whole prompt, chunked to at most
// kCatchUpChunk tokens per sequence and kMaxForwardTokens per forward), logits for each
// sequence's last token only; that row yields draft token 0. Then k - 1 batched forwards of one
// token per still-drafting sequence (slots ask for different k) yield the rest. Every drafted
// token is remembered as cached when it is fed; the last one is never fed. Kernels are
// batch-invariant, so a draft that is the target itself drafts exactly the target's greedy path.
//
// q. Drafts are drawn as draft_sampling.h says (greedy: the argmax, q empty; sampled: q from
// the request's temperature / top-k / top-p / min-p); q rows are dense over the
// TARGET's vocabulary (zeros outside the support and past the draft's vocabulary; draft logits
// past the target's vocabulary are ignored).
//
// Memory. Blocks are allocated for catch-up + k - 1 drafted tokens before the forwards. When
// the pool is short, k is cut to what would fit once every sequence absent from this call were
// evicted (a slot whose catch-up alone cannot fit gets an empty draft and evicts nothing), and
// absent sequences are evicted, least recently used first, only as far as needed. propose()
// never throws for lack of room or for a token the draft cannot embed (that slot gets no draft);
// a failing forward empties the call's drafts and drops the caches involved. Not thread-safe:
// the engine thread alone calls it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "spec/draft_sampling.h"
#include "spec/proposer.h"
#include "tokenizer/tokenizer.h"

namespace zen::spec {

struct DraftModelOptions {
  std::string path;  // the draft checkpoint (any format Model::load takes)
  int n_threads = 0;  // the draft's thread pool (0: all cores), unless it shares one:
  ThreadPool* shared_pool = nullptr;  // e.g. the target's (the two never run at once)
  KvDType kv_dtype = KvDType::F32;
  int64_t block_size = KvPool::kDefaultBlockSize;
};

// Throws zen::Error unless both tokenizers give every token id the same text, naming the first
// id that differs and both texts. Ids past the shorter tokenizer are allowed only when they are
// padding ("[PAD<id>]" as llama.cpp's converter writes them, or empty).
void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft);

// The rows of the vocabulary both models really use: the tokenizer's size when both models
// have tokenizers (checked with check_same_vocabulary; each config's vocab_size may add
// padding rows beyond it), else the configs' vocab_size, which must then be equal. Throws
// zen::Error on a mismatch, and for a hybrid (recurrent) draft, whose state cannot roll back.
int64_t check_draft_compatible(const Model& target, const Model& draft);

class DraftModelProposer : public Proposer {
 public:
  static constexpr int64_t kCatchUpChunk = 512;        // catch-up tokens per sequence per forward
  static constexpr int64_t kMaxForwardTokens = 2048;   // tokens per catch-up forward, all sequences
  // A drafting sequence's catch-up each step: the bonus token, and the last draft when every
  // draft was accepted (the drafts before it were fed while drafting).
  static constexpr int64_t kStepCatchUp = 2;

  // Loads o.path (with its tokenizer when it has one) and checks it against the target.
  DraftModelProposer(const Model& target, const DraftModelOptions& o);
  // An already-loaded draft model (tests).
  DraftModelProposer(const Model& target, std::unique_ptr<Model> draft, const DraftModelOptions& o);
  ~DraftModelProposer() override;

  size_t kv_bytes_per_token() const override;  // the draft's KV bytes per token at o.kv_dtype
  // Allocates the draft KV pool for this many tokens (rounded up to whole blocks); drops every
  // cached sequence. Must be called before propose().
  void reserve_kv(int64_t tokens);
  void reserve_kv_blocks(int64_t blocks, int64_t block_size, int64_t max_seqs) override {
    (void)max_seqs;
    reserve_kv(blocks * block_size);
  }
  const Model& draft() const { return *draft_; }

  std::string_view name() const override { return "draft_model"; }
  void propose(std::span<DraftSlot> slots) override;
  void finish(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) override;
  // k x the measured time of a draft forward of `seqs` one-token rows (a moving average per
  // forward size, interpolated; catch-up forwards count too); 0 before anything was measured.
  double cost_seconds(int64_t seqs, int32_t k) const override;
  // The forwards that would feed the tokens the cache lacks beyond a step's usual few (the
  // bonus token and accepted drafts), as measured; 0 before anything was measured.
  double catch_up_seconds(uint64_t seq_id, std::span<const int32_t> tokens) const override;

  // Introspection (tests, stats).
  int64_t num_blocks() const { return pool_ ? pool_->num_blocks() : 0; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_cached_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t cached_tokens(uint64_t seq_id) const;  // 0 for unknown sequences
  int64_t evictions() const { return evictions_; }
  int64_t forward_failures() const { return forward_failures_; }
  const std::string& last_error() const { return last_error_; }

 private:
  struct SeqState {
    std::vector<int32_t> tokens;  // [cached] tokens whose K/V are in the draft pool, positions 0..
    std::vector<int32_t> blocks;  // [>= ceil(cached / block_size)] physical block table
    DraftSampler sampler;              // draws drafts (draft_sampling.h)
    uint64_t last_used = 0;            // propose() call that last drafted for it (LRU)
  };
  // One slot's work in the current call.
  struct Work {
    size_t slot = 0;        // index into the call's slots
    SeqState* st = nullptr;
    int64_t fed = 0;        // slot tokens in the cache so far (catch-up progress)
    int64_t n = 0;          // slot.tokens.size()
    int32_t k = 0;          // tokens to draft (0: none)
    bool greedy = true;
  };

  void init(const Model& target);
  void propose_impl(std::span<DraftSlot> slots);
  // Gives st blocks for `tokens` positions, evicting other sequences (LRU) when short; false
  // (nothing allocated beyond what st holds) when even that is not enough.
  bool grow(SeqState& st, int64_t tokens);
  void shrink(SeqState& st, int64_t tokens);  // frees blocks past ceil(tokens / block_size)
  bool evict_one();                           // frees the LRU sequence not in this call
  int64_t evictable_blocks() const;           // blocks held by sequences not in this call
  void drop(uint64_t seq_id);
  void run_forward(std::span<const SeqSlice> slices);  // into logits_, records its time
  void draft_one(Work& w, DraftSlot& slot, const float* row);
  void record_time(int64_t tokens, double seconds);
  double predict(int64_t tokens) const;

  DraftModelOptions o_;
  std::unique_ptr<Model> draft_;
  int64_t target_vocab_ = 0;  // V: q row width
  int64_t draft_vocab_ = 0;   // Vd: draft logits row width
  int64_t use_vocab_ = 0;     // min(V, Vd, real vocabulary): ids the draft may draft
  std::unique_ptr<KvPool> pool_;
  std::vector<int32_t> free_;  // [free blocks] stack of free physical block ids
  std::unordered_map<uint64_t, SeqState> seqs_;
  uint64_t clock_ = 0;  // propose() calls so far

  // Per-call scratch, reused.
  std::vector<Work> work_;
  std::vector<SeqSlice> slices_;
  std::vector<size_t> slice_work_;  // [slices] index into work_
  std::vector<float> logits_;       // [rows, Vd]

  // Measured forward seconds by token count (an exponential moving average per count), sorted
  // by count: [distinct counts measured] (tokens, seconds).
  std::vector<std::pair<int64_t, double>> timed_;
  // Whole propose() calls by (sequences, largest k), moving averages: they include the
  // catch-up forward (accepted drafts and the bonus token), which per-forward times miss.
  std::map<std::pair<int64_t, int32_t>, double> calls_;
  int64_t catch_up_tokens_ = 0;  // fed in the last call's catch-up forward
  int64_t evictions_ = 0, forward_failures_ = 0;
  std::string last_error_;
};

}  // namespace zen::spec
