#include "spec/draft_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>

#include "base/error.h"
#include "base/mmap.h"
#include "spec/controller.h"
#include "spec/draft_sampling.h"
#include "io/checkpoint.h"

namespace zen::spec {

namespace {

// A token's text for an error message: printable ASCII as is, other bytes as \xNN, quoted.
std::string show(const std::string& text) {
  std::string out = "\"";
  const size_t limit = 64;
  for (size_t i = 0; i < text.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(c));
      out += buf;
    }
  }
  if (text.size() > limit) out += "...";
  return out + "\"";
}

// Rows past a tokenizer's real vocabulary: llama.cpp's converter names them [PAD<id>].
bool is_padding(int32_t id, const std::string& text) {
  return text.empty() || text == "[PAD" + std::to_string(id) + "]";
}

int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

int64_t count_of(const auto& v) { return static_cast<int64_t>(v.size()); }

}  // namespace

void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft) {
  const int32_t nt = target.vocab_size(), nd = draft.vocab_size();
  const int32_t n = std::min(nt, nd);
  for (int32_t id = 0; id < n; ++id) {
    const std::string a = target.token_bytes(id), b = draft.token_bytes(id);
    if (a != b)
      fail("draft model: its vocabulary differs from the target's at token id ", id, ": target ", show(a), ", draft ",
           show(b));
  }
  const Tokenizer& longer = nt > nd ? target : draft;
  for (int32_t id = n; id < std::max(nt, nd); ++id) {
    const std::string t = longer.token_bytes(id);
    if (is_padding(id, t)) continue;
    const std::string none = "none (its tokenizer has " + std::to_string(n) + " tokens)";
    fail("draft model: its vocabulary differs from the target's at token id ", id, ": target ",
         nt > nd ? show(t) : none, ", draft ", nt > nd ? none : show(t));
  }
}

int64_t check_draft_compatible(const Model& target, const Model& draft) {
  const ModelConfig& tc = target.config();
  const ModelConfig& dc = draft.config();
  if (dc.is_hybrid())
    fail("draft model: ", dc.architecture, " has recurrent (linear-attention) layers, whose state cannot be ",
         "rolled back after rejected drafts; use a full-attention draft model");
  if (target.tokenizer() != nullptr && draft.tokenizer() != nullptr) {
    check_same_vocabulary(*target.tokenizer(), *draft.tokenizer());
    // Ids past the smaller tokenizer are padding (checked above), and so may be its own last
    // ones (GGUF vocabularies list [PAD<id>] rows): the draft never drafts them.
    int32_t real = std::min(target.tokenizer()->vocab_size(), draft.tokenizer()->vocab_size());
    while (real > 0 && is_padding(real - 1, target.tokenizer()->token_bytes(real - 1))) --real;
    if (dc.vocab_size < real)
      fail("draft model: its vocab_size ", dc.vocab_size, " is smaller than the tokenizer's ", real, " tokens");
    if (tc.vocab_size < real)
      fail("draft model: the target's vocab_size ", tc.vocab_size, " is smaller than the tokenizer's ", real, " tokens");
    return real;
  }
  if (tc.vocab_size != dc.vocab_size)
    fail("draft model: vocab_size ", dc.vocab_size, " differs from the target's ", tc.vocab_size,
         ", and without both tokenizers the padding rows cannot be told from real tokens");
  return tc.vocab_size;
}

DraftModelProposer::DraftModelProposer(const Model& target, const DraftModelOptions& o) : o_(o) {
  if (o_.path.empty()) fail("draft model: no path given");
  draft_ = Model::load(o_.path, {.n_threads = o_.n_threads, .shared_pool = o_.shared_pool, .load_tokenizer = false});
  // The tokenizer only matters for the vocabulary check, and only when the target has one; a
  // draft folder without tokenizer.json is fine (then the config vocab sizes must match).
  if (target.tokenizer() != nullptr) {
    const Checkpoint& ckpt = draft_->checkpoint();
    if (ckpt.gguf() != nullptr) {
      draft_->attach_tokenizer(Tokenizer::from_gguf(*ckpt.gguf()));
    } else if (file_exists(ckpt.folder() + "/tokenizer.json")) {
      draft_->attach_tokenizer(Tokenizer::load(ckpt.folder()));
    }
    draft_->checkpoint().release_loader_pages();
  }
  init(target);
}

DraftModelProposer::DraftModelProposer(const Model& target, std::unique_ptr<Model> draft, const DraftModelOptions& o)
    : o_(o), draft_(std::move(draft)) {
  if (!draft_) fail("draft model: none given");
  init(target);
}

DraftModelProposer::~DraftModelProposer() = default;

void DraftModelProposer::init(const Model& target) {
  if (o_.block_size <= 0) fail("draft model: KV block size must be positive, got ", o_.block_size);
  const int64_t real = check_draft_compatible(target, *draft_);
  target_vocab_ = target.config().vocab_size;
  draft_vocab_ = draft_->config().vocab_size;
  use_vocab_ = std::min({target_vocab_, draft_vocab_, real});
}

size_t DraftModelProposer::kv_bytes_per_token() const { return KvPool::bytes_per_token(draft_->config(), o_.kv_dtype); }

void DraftModelProposer::reserve_kv(int64_t tokens) {
  if (tokens <= 0) fail("draft model: KV capacity must be positive, got ", tokens, " tokens");
  const int64_t blocks = blocks_for(tokens, o_.block_size);
  if (blocks > std::numeric_limits<int32_t>::max())
    fail("draft model: KV capacity of ", tokens, " tokens is too large");
  seqs_.clear();
  pool_.reset();
  pool_ = std::make_unique<KvPool>(draft_->config(), blocks, o_.kv_dtype, o_.block_size);
  free_.clear();
  free_.reserve(static_cast<size_t>(blocks));
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));  // pops 0, 1, 2, ...
}

int64_t DraftModelProposer::cached_tokens(uint64_t seq_id) const {
  const auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : count_of(it->second.tokens);
}

void DraftModelProposer::shrink(SeqState& st, int64_t tokens) {
  const auto keep = static_cast<size_t>(blocks_for(tokens, pool_->block_size()));
  while (st.blocks.size() > keep) {
    free_.push_back(st.blocks.back());
    st.blocks.pop_back();
  }
}

bool DraftModelProposer::evict_one() {
  auto victim = seqs_.end();
  for (auto it = seqs_.begin(); it != seqs_.end(); ++it) {
    const SeqState& s = it->second;
    if (s.last_used == clock_ || s.blocks.empty()) continue;  // in this call, or holds nothing
    if (victim == seqs_.end() || s.last_used < victim->second.last_used) victim = it;
  }
  if (victim == seqs_.end()) return false;
  shrink(victim->second, 0);
  seqs_.erase(victim);
  ++evictions_;
  return true;
}

int64_t DraftModelProposer::evictable_blocks() const {
  int64_t n = 0;
  for (const auto& [id, s] : seqs_)
    if (s.last_used != clock_) n += count_of(s.blocks);
  return n;
}

bool DraftModelProposer::grow(SeqState& st, int64_t tokens) {
  const int64_t need = blocks_for(tokens, pool_->block_size()) - count_of(st.blocks);
  if (need <= 0) return true;
  while (count_of(free_) < need)
    if (!evict_one()) return false;
  for (int64_t i = 0; i < need; ++i) {
    st.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void DraftModelProposer::drop(uint64_t seq_id) {
  const auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  if (pool_) shrink(it->second, 0);
  seqs_.erase(it);
}

void DraftModelProposer::finish(uint64_t seq_id, std::span<const int32_t> tokens, int64_t prompt_len) {
  (void)tokens, (void)prompt_len;
  drop(seq_id);
}

void DraftModelProposer::propose(std::span<DraftSlot> slots) {
  if (!pool_) fail("draft model: reserve_kv() must be called before propose()");
  ++clock_;
  for (DraftSlot& s : slots) {
    s.draft.clear();
    s.q.clear();
  }
  work_.clear();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t drafting = 0;
  int32_t k = 0;
  for (const DraftSlot& s : slots) {
    drafting += s.max_tokens > 0 ? 1 : 0;
    k = std::max(k, s.max_tokens);
  }
  try {
    propose_impl(slots);
    // Calls that caught up on a prompt say nothing about a step's drafting cost.
    if (drafting > 0 && catch_up_tokens_ <= drafting * kStepCatchUp) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      auto [it, fresh] = calls_.try_emplace({drafting, k}, seconds);
      if (!fresh) it->second += 0.25 * (seconds - it->second);
    }
  } catch (const std::exception& e) {
    // A forward failed half-way: whatever it wrote is suspect, so forget the sequences it
    // touched (their next propose() catches up from scratch) and draft nothing this time.
    ++forward_failures_;
    last_error_ = e.what();
    for (DraftSlot& s : slots) {
      s.draft.clear();
      s.q.clear();
    }
    for (const Work& w : work_) drop(slots[w.slot].seq_id);
    work_.clear();
  }
}

void DraftModelProposer::propose_impl(std::span<DraftSlot> slots) {
  // 1. Roll each sequence's cache back to the common prefix with its tokens.
  for (size_t i = 0; i < slots.size(); ++i) {
    DraftSlot& s = slots[i];
    if (s.max_tokens <= 0 || s.tokens.empty()) continue;
    SeqState& st = seqs_[s.seq_id];
    if (st.last_used == clock_) continue;  // the same sequence twice in one call: draft once
    st.last_used = clock_;
    const int64_t n = count_of(s.tokens);
    const int64_t limit = std::min(count_of(st.tokens), n - 1);  // the last token always runs
    int64_t c = 0;
    while (c < limit && st.tokens[static_cast<size_t>(c)] == s.tokens[static_cast<size_t>(c)]) ++c;
    st.tokens.resize(static_cast<size_t>(c));
    shrink(st, c);
    // A token the draft cannot embed (a target padding row): no draft for this sequence.
    const bool embeddable = std::all_of(s.tokens.begin() + c, s.tokens.end(),
                                        [this](int32_t t) { return t >= 0 && t < draft_vocab_; });
    if (!embeddable) continue;
    Work w;
    w.slot = i;
    w.st = &st;  // stable: unordered_map nodes do not move, and only absent sequences are evicted
    w.fed = c;
    w.n = n;
    w.k = s.max_tokens;
    w.greedy = is_greedy_request(s.sampling);
    work_.push_back(w);
  }

  // 2. Blocks for the catch-up and the k - 1 fed drafts: k is cut to what the pool could hold
  // after evicting every sequence absent from this call, then absent sequences are evicted
  // (least recently used first) only as far as needed.
  const int64_t bs = pool_->block_size();
  for (Work& w : work_) {
    SeqState& st = *w.st;
    const int64_t room = (count_of(st.blocks) + count_of(free_) + evictable_blocks()) * bs;
    w.k = static_cast<int32_t>(std::min<int64_t>(w.k, room - w.n + 1));
    if (w.k <= 0 || !grow(st, w.n + w.k - 1)) {
      w.k = 0;
      continue;
    }
    DraftSlot& s = slots[w.slot];
    if (!w.greedy) s.q.assign(static_cast<size_t>(w.k) * static_cast<size_t>(target_vocab_), 0.0f);
    s.draft.reserve(static_cast<size_t>(w.k));
    // The catch-up tokens are cached once the forwards below have run.
    st.tokens.insert(st.tokens.end(), s.tokens.begin() + w.fed, s.tokens.end());
    st.tokens.reserve(static_cast<size_t>(w.n + w.k));
  }

  // 3. Catch-up: every sequence's missing tokens, in chunks; the last token's row is draft 0.
  // One forward per call at most, so a long prompt's catch-up is spread over steps (a 32k
  // prompt must not stall every stream for one step); who is not caught up drafts nothing yet.
  catch_up_tokens_ = 0;
  do {
    slices_.clear();
    slice_work_.clear();
    int64_t budget = kMaxForwardTokens;
    for (size_t wi = 0; wi < work_.size() && budget > 0; ++wi) {
      Work& w = work_[wi];
      if (w.k == 0 || w.fed == w.n) continue;
      const int64_t take = std::min({w.n - w.fed, kCatchUpChunk, budget});
      SeqSlice sl;
      sl.tokens = slots[w.slot].tokens.subspan(static_cast<size_t>(w.fed), static_cast<size_t>(take));
      sl.pos = w.fed;
      sl.blocks = w.st->blocks;
      slices_.push_back(sl);
      slice_work_.push_back(wi);
      budget -= take;
    }
    if (slices_.empty()) break;
    run_forward(slices_);
    for (size_t r = 0; r < slices_.size(); ++r) {
      Work& w = work_[slice_work_[r]];
      w.fed += count_of(slices_[r].tokens);
      catch_up_tokens_ += count_of(slices_[r].tokens);
      if (w.fed == w.n) draft_one(w, slots[w.slot], logits_.data() + static_cast<int64_t>(r) * draft_vocab_);
    }
  } while (false);
  for (Work& w : work_) {  // not caught up: keep what was fed, draft next time
    if (w.k == 0 || w.fed == w.n) continue;
    w.st->tokens.resize(static_cast<size_t>(w.fed));
    shrink(*w.st, w.fed);
    slots[w.slot].draft.clear();
    slots[w.slot].q.clear();
    w.k = 0;
  }

  // 4. k - 1 decode rounds: feed each still-drafting sequence its latest draft.
  for (;;) {
    slices_.clear();
    slice_work_.clear();
    for (size_t wi = 0; wi < work_.size(); ++wi) {
      Work& w = work_[wi];
      const DraftSlot& s = slots[w.slot];
      if (w.k == 0 || count_of(s.draft) >= w.k) continue;
      std::vector<int32_t>& cached = w.st->tokens;
      cached.push_back(s.draft.back());
      SeqSlice sl;
      sl.tokens = std::span<const int32_t>(&cached.back(), 1);
      sl.pos = count_of(cached) - 1;
      sl.blocks = w.st->blocks;
      slices_.push_back(sl);
      slice_work_.push_back(wi);
    }
    if (slices_.empty()) break;
    run_forward(slices_);
    for (size_t r = 0; r < slices_.size(); ++r) {
      Work& w = work_[slice_work_[r]];
      draft_one(w, slots[w.slot], logits_.data() + static_cast<int64_t>(r) * draft_vocab_);
    }
  }
}

void DraftModelProposer::run_forward(std::span<const SeqSlice> slices) {
  int64_t tokens = 0;
  for (const SeqSlice& s : slices) tokens += count_of(s.tokens);
  logits_.resize(slices.size() * static_cast<size_t>(draft_vocab_));
  ForwardBatch batch;
  batch.kv = pool_.get();
  batch.seqs = slices;
  const auto t0 = std::chrono::steady_clock::now();
  draft_->forward(batch, logits_.data());
  record_time(tokens, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void DraftModelProposer::draft_one(Work& w, DraftSlot& slot, const float* row) {
  w.st->sampler.draw(slot.sampling, row, use_vocab_, target_vocab_, slot);
}

void DraftModelProposer::record_time(int64_t tokens, double seconds) {
  auto it = std::lower_bound(timed_.begin(), timed_.end(), tokens,
                             [](const std::pair<int64_t, double>& e, int64_t t) { return e.first < t; });
  if (it != timed_.end() && it->first == tokens) {
    it->second += 0.25 * (seconds - it->second);
  } else {
    timed_.insert(it, {tokens, seconds});
  }
}

// Interpolated between measured sizes. Outside them it errs low (proportional below the
// smallest, flat above the largest): an overestimate could make the controller stop drafting,
// and then nothing would ever be measured again to correct it.
double DraftModelProposer::predict(int64_t tokens) const {
  if (timed_.empty() || tokens <= 0) return 0;
  const auto it = std::lower_bound(timed_.begin(), timed_.end(), tokens,
                                   [](const std::pair<int64_t, double>& e, int64_t t) { return e.first < t; });
  if (it == timed_.end()) return timed_.back().second;
  if (it->first == tokens) return it->second;
  if (it == timed_.begin())
    return it->second * static_cast<double>(tokens) / static_cast<double>(it->first);
  const auto lo = it - 1;
  const double f = static_cast<double>(tokens - lo->first) / static_cast<double>(it->first - lo->first);
  return lo->second + f * (it->second - lo->second);
}

double DraftModelProposer::catch_up_seconds(uint64_t seq_id, std::span<const int32_t> tokens) const {
  int64_t cached = 0;
  if (const auto it = seqs_.find(seq_id); it != seqs_.end()) {
    const std::vector<int32_t>& have = it->second.tokens;
    const size_t n = std::min(have.size(), tokens.size());
    cached = std::mismatch(have.begin(), have.begin() + static_cast<std::ptrdiff_t>(n), tokens.begin()).first - have.begin();
  }
  // A drafting step's own catch-up is in cost_seconds already: the last draft (when all were
  // accepted) and the bonus token, at most kStepCatchUp. More is a stretch without drafts.
  const int64_t missing = count_of(tokens) - cached;
  if (missing <= kStepCatchUp) return 0;
  // Fed kCatchUpChunk tokens a forward (one sequence), as propose_impl does.
  const int64_t forwards = (missing + kCatchUpChunk - 1) / kCatchUpChunk;
  const double all = static_cast<double>(forwards - 1) * predict(kCatchUpChunk) + predict(missing - (forwards - 1) * kCatchUpChunk);
  return std::max(0.0, all - predict(kStepCatchUp));
}

double DraftModelProposer::cost_seconds(int64_t seqs, int32_t k) const {
  if (seqs <= 0 || k <= 0) return 0;
  if (auto it = calls_.find({seqs, k}); it != calls_.end()) return it->second;
  // Unmeasured: k forwards of one token per sequence, plus the catch-up forward.
  return static_cast<double>(k + 1) * predict(seqs);
}

}  // namespace zen::spec
