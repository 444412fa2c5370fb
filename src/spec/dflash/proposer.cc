#include "spec/dflash/proposer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/error.h"

namespace zen::spec::dflash {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

DFlashProposer::DFlashProposer(Model& target, const std::string& folder, bool q8_0)
    : DFlashProposer(target, Drafter::load(folder, target, q8_0)) {}

DFlashProposer::DFlashProposer(Model& target, std::unique_ptr<Drafter> drafter)
    : target_(target), drafter_(std::move(drafter)) {}

size_t DFlashProposer::kv_bytes_per_token() const {
  return static_cast<size_t>(drafter_->config().kv_bytes_per_token());
}

Proposer::WindowKv DFlashProposer::window_kv(int64_t max_seqs, int64_t block_size) const {
  const DrafterConfig& c = drafter_->config();
  if (c.max_window() == 0) return {};
  return {KvPool::bytes_per_token(c.kv_config(true), KvDType::F32),
          WindowStore::blocks_per_sequence(c.max_window(), block_size) * max_seqs};
}

void DFlashProposer::reserve_kv_blocks(int64_t blocks, int64_t block_size, int64_t max_seqs) {
  const DrafterConfig& c = drafter_->config();
  store_ = std::make_unique<KvPool>(c.kv_config(false), blocks, KvDType::F32, block_size);
  window_ = c.max_window() > 0
                ? std::make_unique<WindowStore>(c.kv_config(true), c.max_window(), blocks, block_size, max_seqs)
                : nullptr;
  contexts_.clear();
}

int64_t DFlashProposer::pending_count(const Context& c) const {
  return static_cast<int64_t>(c.taps.size()) / drafter_->config().tap_width();
}

int64_t DFlashProposer::pending_rows(uint64_t seq_id) const {
  const auto it = contexts_.find(seq_id);
  return it == contexts_.end() ? 0 : pending_count(it->second);
}

// Keeps the committed rows' taps as pending; a row at or before what is already kept
// (recomputation after preemption) replaces it and what follows; a row past it (a prefix the
// target found cached) starts over there. Sequences with too many pending rows project now.
void DFlashProposer::commit(std::span<const CommittedRows> rows, const float* taps) {
  if (store_ == nullptr) fail("DFlash: commit() before reserve_kv_blocks()");
  const int64_t width = drafter_->config().tap_width();
  std::vector<Context*> full;
  std::vector<std::span<const int32_t>> full_blocks;
  for (const CommittedRows& r : rows) {
    Context& c = contexts_.try_emplace(r.seq_id, Context{.done = r.pos}).first->second;
    const int64_t end = c.done + pending_count(c);
    if (r.pos < c.done || r.pos > end) {
      c.done = r.pos;
      c.taps.clear();
    } else {
      c.taps.resize(static_cast<size_t>((r.pos - c.done) * width));
    }
    c.taps.insert(c.taps.end(), taps + r.row * width, taps + (r.row + r.n) * width);
    if (pending_count(c) > kMaxPendingRows && std::find(full.begin(), full.end(), &c) == full.end()) {
      full.push_back(&c);
      full_blocks.push_back(r.kv_blocks);
    }
  }
  if (!full.empty()) project(full, full_blocks);
}

// The context K/V of the pending rows, projected in one batch and stored at the rows'
// positions in their sequences' target blocks.
void DFlashProposer::project(std::span<Context* const> contexts, std::span<const std::span<const int32_t>> blocks) {
  const auto t0 = Clock::now();
  taps_.clear();
  positions_.clear();
  for (const Context* c : contexts) {
    taps_.insert(taps_.end(), c->taps.begin(), c->taps.end());
    for (int64_t i = 0; i < pending_count(*c); ++i) positions_.push_back(c->done + i);
  }
  if (positions_.empty()) return;
  drafter_->context_kv(taps_.data(), positions_, k_, v_);
  const DrafterConfig& cfg = drafter_->config();
  const ModelConfig& d = cfg.decoder;
  const auto kv_dim = static_cast<size_t>(d.num_kv_heads * d.head_dim);
  const int64_t bs = store_->block_size();
  std::vector<const float*> sliding_k, sliding_v;  // [sliding layer] one position's rows
  size_t i = 0;
  for (size_t s = 0; s < contexts.size(); ++s) {
    Context& c = *contexts[s];
    const int64_t end = c.done + pending_count(c);
    for (int64_t pos = c.done; pos < end; ++pos, ++i) {
      sliding_k.clear();
      sliding_v.clear();
      for (int l = 0; l < static_cast<int>(k_.size()); ++l) {
        const float* k = &k_[static_cast<size_t>(l)][i * kv_dim];
        const float* v = &v_[static_cast<size_t>(l)][i * kv_dim];
        if (d.attention_window(l) == 0) {
          store_->store(cfg.store_index(l), blocks[s], pos, k, v);
        } else {
          sliding_k.push_back(k);
          sliding_v.push_back(v);
        }
      }
      // Sliding rows only inside the window the sequence's next block reads.
      if (window_ != nullptr && pos >= end - (window_->window() - 1))
        window_->store(blocks[s][static_cast<size_t>(pos / bs)], pos % bs, sliding_k, sliding_v);
    }
    c.done = end;
    c.taps.clear();
  }
  const double spent = seconds_since(t0);
  context_seconds_ += spent;
  if (static_cast<int64_t>(positions_.size()) >= kBulkRows)
    context_seconds_per_row_ = context_seconds_per_row_ == 0 ? spent / static_cast<double>(positions_.size())
                                                             : context_seconds_per_row_ + 0.25 * (spent / static_cast<double>(positions_.size()) - context_seconds_per_row_);
}

void DFlashProposer::propose(std::span<DraftSlot> slots) {
  if (store_ == nullptr) fail("DFlash: propose() before reserve_kv_blocks()");
  const DrafterConfig& c = drafter_->config();
  const int64_t B = c.block_size, V = target_.config().vocab_size;
  jobs_.clear();
  job_slot_.clear();
  pending_.clear();
  pending_blocks_.clear();
  blocks_.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    DraftSlot& s = slots[i];
    s.draft.clear();
    s.q.clear();
    const auto length = static_cast<int64_t>(s.tokens.size()) - 1;  // context positions
    if (s.max_tokens <= 0 || length < 1) continue;
    if (static_cast<int64_t>(s.kv_blocks.size()) * store_->block_size() < length)
      fail("DFlash: sequence ", s.seq_id, " has ", length, " cached tokens but a block table of ", s.kv_blocks.size());
    // Every context row must be known (a sequence whose rows the engine has not committed yet,
    // e.g. mid-recomputation, drafts nothing); pending ones are projected below.
    const auto ctx = contexts_.find(s.seq_id);
    if (ctx == contexts_.end() || ctx->second.done + pending_count(ctx->second) != length) continue;
    if (!ctx->second.taps.empty()) {
      pending_.push_back(&ctx->second);
      pending_blocks_.push_back(s.kv_blocks);
    }
    if (window_ != nullptr)  // the rows this block's sliding layers read stay the last to be recycled
      for (int64_t b = std::max<int64_t>(0, length - (window_->window() - 1)) / store_->block_size();
           b * store_->block_size() < length; ++b)
        window_->touch(s.kv_blocks[static_cast<size_t>(b)]);
    std::vector<int32_t>& block = blocks_[jobs_.size()];
    block.assign(static_cast<size_t>(B), c.mask_token_id);
    block[0] = s.tokens.back();
    jobs_.push_back(BlockJob{ContextView{.length = length, .pool = store_.get(), .window = window_.get(), .blocks = s.kv_blocks},
                             block, s.max_tokens});
    job_slot_.push_back(i);
  }
  if (jobs_.empty()) return;
  int64_t pending = 0;
  for (const Context* ctx : pending_) pending += pending_count(*ctx);
  const auto t_context = Clock::now();
  project(pending_, pending_blocks_);
  auto average = [](double& avg, double x) { avg = avg == 0 ? x : avg + 0.25 * (x - avg); };
  // A step's usual projection (the decoded token and accepted drafts); longer catch-ups are
  // charged through catch_up_seconds.
  if (pending <= kUsualRows * static_cast<int64_t>(jobs_.size()))
    average(context_seconds_per_seq_, seconds_since(t_context) / static_cast<double>(jobs_.size()));
  int64_t rows = 0;
  for (const BlockJob& job : jobs_) rows += job.drafts();
  logits_.resize(static_cast<size_t>(rows * V));
  if (c.v2()) hidden_.resize(static_cast<size_t>(rows * c.decoder.hidden_size));
  const auto t0 = Clock::now();
  Drafter::Timing t;
  drafter_->draft(jobs_, logits_.data(), &t, c.v2() ? hidden_.data() : nullptr);
  const double spent = seconds_since(t0);
  head_seconds_ += t.head;
  layer_seconds_ += spent - t.head;  // the selector, if any, runs below and is not counted
  blocks_drafted_ += static_cast<int64_t>(jobs_.size());
  average(block_seconds_[static_cast<int64_t>(jobs_.size())], spent - t.head);
  average(head_seconds_per_row_, t.head / static_cast<double>(rows));
  size_t row0 = 0;  // the job's first logits row
  for (size_t j = 0; j < jobs_.size(); row0 += static_cast<size_t>(jobs_[j].drafts()), ++j) {
    DraftSlot& s = slots[job_slot_[j]];
    const int64_t k = jobs_[j].drafts();
    if (!is_greedy_request(s.sampling)) s.q.assign(static_cast<size_t>(k * V), 0.0f);
    if (c.v2()) {
      select(s, &hidden_[row0 * static_cast<size_t>(c.decoder.hidden_size)], &logits_[row0 * static_cast<size_t>(V)], k);
      continue;
    }
    DraftSampler& sampler = samplers_[s.seq_id];
    for (int64_t i = 0; i < k; ++i) sampler.draw(s.sampling, &logits_[(row0 + static_cast<size_t>(i)) * static_cast<size_t>(V)], V, V, s);
  }
}

// DFlash 2: the selector's path. Sampled requests draw each step from softmax(scores / T) over
// the candidates (the reference's selector uses the temperature alone), which is q.
void DFlashProposer::select(DraftSlot& s, const float* hidden, const float* logits, int64_t k) {
  const int64_t V = target_.config().vocab_size;
  const bool greedy = is_greedy_request(s.sampling);
  Sampler* stream = greedy ? nullptr : &samplers_[s.seq_id].stream(*s.sampling);
  std::vector<TokenProb> dist;
  auto choose = [&](std::span<const float> scores, std::span<const int32_t> candidates, int64_t pos) -> size_t {
    if (greedy) return static_cast<size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
    const double m = *std::max_element(scores.begin(), scores.end());
    const double t = s.sampling->temperature;
    dist.clear();
    double z = 0;
    for (size_t i = 0; i < scores.size(); ++i) {
      dist.push_back({static_cast<int32_t>(i), std::exp((scores[i] - m) / t)});
      z += dist.back().p;
    }
    for (TokenProb& e : dist) {
      e.p /= z;
      s.q[static_cast<size_t>(pos * V + candidates[static_cast<size_t>(e.token)])] += static_cast<float>(e.p);
    }
    return static_cast<size_t>(stream->draw(dist));
  };
  s.draft = drafter_->select(hidden, logits, k, s.tokens.back(), choose);
}

std::vector<std::pair<std::string, double>> DFlashProposer::time_by_part() const {
  return {{"draft layers", layer_seconds_}, {"output head rows", head_seconds_}, {"context K/V", context_seconds_},
          {"blocks", static_cast<double>(blocks_drafted_)}};
}

void DFlashProposer::finish(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) {
  (void)tokens, (void)prompt_len;
  samplers_.erase(seq_id);
  contexts_.erase(seq_id);
}

double DFlashProposer::catch_up_seconds(uint64_t seq_id, std::span<const int32_t> tokens) const {
  (void)tokens;
  return static_cast<double>(std::max<int64_t>(0, pending_rows(seq_id) - kUsualRows)) * context_seconds_per_row_;
}

// The block's layers, whatever k (interpolated between measured sequence counts, proportional
// below the smallest, flat above the largest: an overestimate could stop drafting for good),
// plus the output head for seqs x k rows and the usual projection of each sequence's new rows.
double DFlashProposer::cost_seconds(int64_t seqs, int32_t k) const {
  if (block_seconds_.empty() || seqs <= 0) return 0;
  const double head = (head_seconds_per_row_ * static_cast<double>(k) + context_seconds_per_seq_) * static_cast<double>(seqs);
  const auto hi = block_seconds_.lower_bound(seqs);
  if (hi == block_seconds_.end()) return block_seconds_.rbegin()->second + head;
  if (hi->first == seqs) return hi->second + head;
  if (hi == block_seconds_.begin()) return hi->second * static_cast<double>(seqs) / static_cast<double>(hi->first) + head;
  const auto lo = std::prev(hi);
  const double f = static_cast<double>(seqs - lo->first) / static_cast<double>(hi->first - lo->first);
  return lo->second + f * (hi->second - lo->second) + head;
}

}  // namespace zen::spec::dflash
