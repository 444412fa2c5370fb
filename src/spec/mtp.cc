#include "spec/mtp.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "base/error.h"
#include "spec/controller.h"

namespace zen::spec {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void average(double& avg, double x) { avg = avg == 0 ? x : avg + 0.25 * (x - avg); }

HybridModel& hybrid_with_head(Model& target) {
  auto* hybrid = dynamic_cast<HybridModel*>(&target);
  if (hybrid == nullptr)
    fail("speculative method mtp needs the checkpoint's MTP head (mtp.fc.weight): ", target.config().architecture,
         " is not a Qwen3.5 / 3.6 / Next hybrid model and has none");
  if (!hybrid->mtp_available())
    fail("speculative method mtp needs the checkpoint's MTP head (mtp.fc.weight): ", hybrid->mtp_status());
  return *hybrid;
}

}  // namespace

MtpProposer::MtpProposer(Model& target)
    : target_(hybrid_with_head(target)),
      H_(target.config().hidden_size),
      V_(target.config().vocab_size),
      tap_layer_{static_cast<int32_t>(target.layer_count() - 1)} {}

size_t MtpProposer::kv_bytes_per_token() const { return KvPool::bytes_per_token(target_.mtp_kv_config(), KvDType::F32); }

// The target's blocks, then scratch for the speculative rows of kScratchSequences sequences
// drafting up to kMaxDraftTokens each (at most kMaxDraftTokens - 1 rows past a table that
// covers the cached positions).
void MtpProposer::reserve_kv_blocks(int64_t blocks, int64_t block_size, int64_t max_seqs) {
  (void)max_seqs;
  const int64_t scratch = kScratchSequences * ((kMaxDraftTokens - 1 + block_size - 1) / block_size);
  pool_ = std::make_unique<KvPool>(target_.mtp_kv_config(), blocks + scratch, KvDType::F32, block_size);
  target_blocks_ = blocks;
  seqs_.clear();
}

int64_t MtpProposer::pending_rows(uint64_t seq_id) const {
  const auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : pending_count(it->second);
}

// Keeps the committed rows, final-normed, as pending; a row at or before what is already kept
// (recomputation after preemption) replaces it and what follows; a row past it (a prefix the
// target found cached) starts over there. Sequences with too many pending rows catch up now.
void MtpProposer::commit(std::span<const CommittedRows> rows, const float* taps) {
  if (pool_ == nullptr) fail("MTP: commit() before reserve_kv_blocks()");
  std::vector<SeqState*> full;
  std::vector<std::span<const int32_t>> full_tokens, full_blocks;
  for (const CommittedRows& r : rows) {
    SeqState& st = seqs_.try_emplace(r.seq_id, SeqState{.done = r.pos}).first->second;
    const int64_t end = st.done + pending_count(st);
    if (r.pos < st.done || r.pos > end) {
      st.done = r.pos;
      st.pending.clear();
      st.last.clear();
    } else {
      st.pending.resize(static_cast<size_t>((r.pos - st.done) * H_));
    }
    const size_t at = st.pending.size();
    st.pending.resize(at + static_cast<size_t>(r.n * H_));
    target_.final_norm_rows(taps + r.row * H_, r.n, &st.pending[at]);
    if (pending_count(st) > kMaxPendingRows && static_cast<int64_t>(r.tokens.size()) > r.pos + r.n &&
        std::find(full.begin(), full.end(), &st) == full.end()) {
      full.push_back(&st);
      full_tokens.push_back(r.tokens);
      full_blocks.push_back(r.kv_blocks);
    }
  }
  if (!full.empty()) catch_up(full, full_tokens, full_blocks);
}

double MtpProposer::run_head(std::span<const SeqSlice> slices, const float* hidden) {
  ForwardBatch batch;
  batch.kv = pool_.get();
  batch.seqs = slices;
  const auto t0 = Clock::now();
  target_.mtp_forward(batch, hidden, nullptr);
  const double spent = seconds_since(t0);
  layer_seconds_ += spent;
  return spent;
}

double MtpProposer::catch_up(std::span<SeqState* const> states, std::span<const std::span<const int32_t>> tokens,
                             std::span<const std::span<const int32_t>> blocks) {
  slices_.clear();
  hidden_.clear();
  int64_t rows = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    SeqState& st = *states[i];
    const int64_t n = pending_count(st);
    SeqSlice s;
    s.tokens = tokens[i].subspan(static_cast<size_t>(st.done + 1), static_cast<size_t>(n));  // t_{i+1} of each row
    s.pos = st.done;
    s.blocks = blocks[i];
    slices_.push_back(s);
    hidden_.insert(hidden_.end(), st.pending.begin(), st.pending.end());
    rows += n;
  }
  const double spent = run_head(slices_, hidden_.data());
  if (rows >= kBulkRows) average(catch_up_seconds_per_row_, spent / static_cast<double>(rows));
  const std::span<const float> out = target_.mtp_hidden();
  for (size_t i = 0; i < states.size(); ++i) {
    SeqState& st = *states[i];
    st.last.assign(out.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(H_)),
                   out.begin() + static_cast<std::ptrdiff_t>((i + 1) * static_cast<size_t>(H_)));
    st.done += pending_count(st);
    st.pending.clear();
  }
  return spent;
}

void MtpProposer::propose(std::span<DraftSlot> slots) {
  if (pool_ == nullptr) fail("MTP: propose() before reserve_kv_blocks()");
  const int64_t bs = pool_->block_size();
  int32_t next_scratch = static_cast<int32_t>(target_blocks_);
  work_.clear();
  for (size_t i = 0; i < slots.size(); ++i) {
    DraftSlot& s = slots[i];
    s.draft.clear();
    s.q.clear();
    const auto n = static_cast<int64_t>(s.tokens.size());
    const auto it = seqs_.find(s.seq_id);
    if (s.max_tokens <= 0 || n < 2 || it == seqs_.end()) continue;
    SeqState& st = it->second;
    // Every row through n - 2 must be kept (a sequence whose rows the engine has not committed
    // yet, e.g. mid-recomputation, drafts nothing).
    if (st.done + pending_count(st) != n - 1 || (st.pending.empty() && st.last.empty())) continue;
    const auto have = static_cast<int64_t>(s.kv_blocks.size());
    if (have * bs < n - 1) continue;  // the engine's table lacks cached positions: no draft for it
    Work w{.slot = i, .st = &st, .k = std::min(s.max_tokens, kMaxDraftTokens)};
    // Steps 2..k write rows n-1 .. n-3+k: the table must cover n-2+k positions.
    const int64_t scratch_left = pool_->num_blocks() - next_scratch;
    w.k = static_cast<int32_t>(std::min<int64_t>(w.k, (have + scratch_left) * bs - n + 2));
    w.blocks.assign(s.kv_blocks.begin(), s.kv_blocks.end());
    while (static_cast<int64_t>(w.blocks.size()) * bs < n - 2 + w.k) w.blocks.push_back(next_scratch++);
    work_.push_back(std::move(w));
  }
  if (work_.empty()) return;
  try {
    // Step 1: catch up the pending rows; each slot's last output is draft 1's head input.
    std::vector<SeqState*> states;
    std::vector<std::span<const int32_t>> tokens, blocks;
    for (const Work& w : work_)
      if (!w.st->pending.empty()) {
        states.push_back(w.st);
        tokens.push_back(slots[w.slot].tokens);
        blocks.push_back(slots[w.slot].kv_blocks);
      }
    if (!states.empty()) {
      int64_t rows = 0;
      for (const SeqState* st : states) rows += pending_count(*st);
      const double spent = catch_up(states, tokens, blocks);
      // A step's cost, when the catch-up is the usual few rows per sequence (a long one is
      // charged through catch_up_seconds instead).
      if (rows <= kUsualRows * static_cast<int64_t>(states.size()))
        average(step_seconds_[static_cast<int64_t>(states.size())], spent);
    }
    normed_.resize(work_.size() * static_cast<size_t>(H_));
    for (size_t w = 0; w < work_.size(); ++w) std::copy(work_[w].st->last.begin(), work_[w].st->last.end(), &normed_[w * static_cast<size_t>(H_)]);
    for (const Work& w : work_)
      if (!is_greedy_request(slots[w.slot].sampling)) slots[w.slot].q.assign(static_cast<size_t>(w.k * V_), 0.0f);

    std::vector<size_t> active(work_.size());  // works still drafting, in order
    for (size_t w = 0; w < work_.size(); ++w) active[w] = w;
    std::vector<int64_t> step_rows;
    for (int32_t j = 1; !active.empty(); ++j) {
      if (j > 1) {  // one head row per active slot: position n-3+j, token d_{j-1}
        slices_.clear();
        hidden_.resize(active.size() * static_cast<size_t>(H_));
        next_.resize(active.size());
        for (size_t a = 0; a < active.size(); ++a) {
          const Work& w = work_[active[a]];
          const DraftSlot& s = slots[w.slot];
          next_[a].assign(1, s.draft.back());
          SeqSlice slice;
          slice.tokens = next_[a];
          slice.pos = static_cast<int64_t>(s.tokens.size()) - 3 + j;
          slice.blocks = w.blocks;
          slices_.push_back(slice);
          std::copy_n(&normed_[active[a] * static_cast<size_t>(H_)], H_, &hidden_[a * static_cast<size_t>(H_)]);
        }
        average(step_seconds_[static_cast<int64_t>(active.size())], run_head(slices_, hidden_.data()));
        const std::span<const float> out = target_.mtp_hidden();
        for (size_t a = 0; a < active.size(); ++a)
          std::copy_n(&out[a * static_cast<size_t>(H_)], H_, &normed_[active[a] * static_cast<size_t>(H_)]);
      }
      // The output head for the active rows, then one draw each.
      hidden_.resize(active.size() * static_cast<size_t>(H_));
      for (size_t a = 0; a < active.size(); ++a)
        std::copy_n(&normed_[active[a] * static_cast<size_t>(H_)], H_, &hidden_[a * static_cast<size_t>(H_)]);
      logits_.resize(active.size() * static_cast<size_t>(V_));
      const auto t0 = Clock::now();
      target_.output_head(hidden_.data(), static_cast<int64_t>(active.size()), logits_.data());
      const double head = seconds_since(t0);
      head_seconds_ += head;
      average(head_seconds_per_row_, head / static_cast<double>(active.size()));
      std::vector<size_t> still;
      for (size_t a = 0; a < active.size(); ++a) {
        Work& w = work_[active[a]];
        DraftSlot& s = slots[w.slot];
        w.st->sampler.draw(s.sampling, &logits_[a * static_cast<size_t>(V_)], V_, V_, s);
        if (static_cast<int32_t>(s.draft.size()) < w.k) still.push_back(active[a]);
      }
      active.swap(still);
    }
    ++calls_;
  } catch (const std::exception& e) {
    // Draft nothing this step. The states stay: a catch-up changes them only once its forward
    // returned, and rows a failed forward half wrote are rewritten by the next catch-up.
    std::fprintf(stderr, "zen: MTP draft failed, no drafts this step: %s\n", e.what());
    for (const Work& w : work_) {
      slots[w.slot].draft.clear();
      slots[w.slot].q.clear();
    }
  }
}

void MtpProposer::finish(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) {
  (void)tokens, (void)prompt_len;
  seqs_.erase(seq_id);
}

// Interpolated between measured slice counts (proportional below the smallest, flat above the
// largest, as DFlash's), plus the output head's rows; before any step was measured, the
// catch-up forward's cost stands in for a step.
double MtpProposer::cost_seconds(int64_t seqs, int32_t k) const {
  if (seqs <= 0 || k <= 0) return 0;
  double step = 0;
  if (!step_seconds_.empty()) {
    const auto hi = step_seconds_.lower_bound(seqs);
    if (hi == step_seconds_.end()) step = step_seconds_.rbegin()->second;
    else if (hi->first == seqs) step = hi->second;
    else if (hi == step_seconds_.begin()) step = hi->second * static_cast<double>(seqs) / static_cast<double>(hi->first);
    else {
      const auto lo = std::prev(hi);
      const double f = static_cast<double>(seqs - lo->first) / static_cast<double>(hi->first - lo->first);
      step = lo->second + f * (hi->second - lo->second);
    }
  } else {
    step = catch_up_seconds_per_row_ * static_cast<double>(seqs);
  }
  return static_cast<double>(k) * (step + head_seconds_per_row_ * static_cast<double>(seqs));
}

double MtpProposer::catch_up_seconds(uint64_t seq_id, std::span<const int32_t> tokens) const {
  (void)tokens;
  return static_cast<double>(std::max<int64_t>(0, pending_rows(seq_id) - kUsualRows)) * catch_up_seconds_per_row_;
}

std::vector<std::pair<std::string, double>> MtpProposer::time_by_part() const {
  return {{"head layer", layer_seconds_}, {"output head rows", head_seconds_}, {"calls", static_cast<double>(calls_)}};
}

}  // namespace zen::spec
