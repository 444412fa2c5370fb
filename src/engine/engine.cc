#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <unordered_map>

#include "base/error.h"
#include "engine/block_manager.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/state_cache.h"
#include "grammar/matcher.h"
#include "kernels/cpu/packed.h"
#include "model/hybrid.h"
#include "spec/dflash/proposer.h"
#include "spec/draft_model.h"
#include "spec/mtp.h"
#include "spec/ngram.h"
#include "spec/suffix.h"
#include "spec/verifier.h"

namespace zen {
namespace {

constexpr int64_t kGatedDeltaNetChunk = 64;  // hybrid prefill steps end on these boundaries

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return int64_t{4} << 30;
}

// The KV budget in bytes: --kv-memory, or a fraction of the available RAM.
int64_t kv_budget(const EngineOptions& o) {
  int64_t budget = o.kv_memory_bytes;
  if (budget <= 0) {
    if (!(o.kv_memory_fraction > 0 && o.kv_memory_fraction <= 1))
      fail("--kv-memory-fraction must be in (0, 1], got ", o.kv_memory_fraction);
    budget = static_cast<int64_t>(static_cast<double>(available_memory_bytes()) * o.kv_memory_fraction);
  }
  return budget;
}

// The KV a proposer keeps: per token the target caches, and in window blocks (at most one per
// target block).
struct DraftKv {
  size_t per_token = 0;
  spec::Proposer::WindowKv window;
};

// The target's sliding-window layers, kept apart from its other KV layers in a pool bounded
// by the window (WindowBlocks), when it has any (the other ranks of a split model mirror both
// pools from each step's message; a pipeline stage's config counts each group's most layers
// over the stages, and the widest window). When every KV layer slides, the main pool keeps no
// K/V: its blocks are only the ids of block tables and of the prefix cache.
struct TargetWindowKv {
  ModelConfig main;           // the config the main pool is built from
  ModelConfig layers;         // the sliding layers alone (when kept apart)
  int64_t window = 0;         // 0: not kept apart
  int64_t blocks = 0;         // window-pool blocks wanted
  size_t bytes_per_token = 0;  // of the sliding layers
};

TargetWindowKv target_window_kv(const Model& model, const EngineOptions& o) {
  const ModelConfig& cfg = model.config();
  TargetWindowKv w{.main = cfg};
  const int64_t windowed = std::max(cfg.num_window_kv_layers(), cfg.kv_budget_window_layers);
  if (windowed == 0) return w;
  w.main = cfg.kv_group_config(false);
  w.layers = cfg.kv_group_config(true);
  w.window = cfg.max_attention_window();
  w.blocks = WindowBlocks::blocks_needed(w.window, o.block_size, o.max_num_seqs, o.max_num_batched_tokens);
  w.bytes_per_token = KvPool::bytes_per_token(w.layers, o.kv_dtype);
  return w;
}

// KV blocks N of the target's main pool. A proposer's KV takes its share of the same budget
// per target block, and window pools (the drafter's, the target's sliding layers) take
// min(their blocks, N) blocks each: the largest N that fits. A main pool whose blocks cost
// nothing (every layer slides or none keeps K/V, and no proposer keeps KV per token) holds
// block ids only: as many as max_num_seqs sequences fill at the context window, and no more
// than the budget holds at Engine::kBlockIdBytes each (what an id's bookkeeping takes at
// most: block table entry, reference count, free-list node, prefix-cache tokens and hash).

int64_t kv_blocks(const ModelConfig& cfg, const EngineOptions& o, DraftKv draft = {}, const TargetWindowKv& target = {}) {
  const auto block_bytes = static_cast<int64_t>(KvPool::bytes_per_token(cfg, o.kv_dtype) + draft.per_token) * o.block_size;
  const int64_t budget = kv_budget(o);
  const std::pair<int64_t, int64_t> windows[] = {  // (blocks, bytes a block)
      {draft.window.blocks, static_cast<int64_t>(draft.window.bytes_per_token) * o.block_size},
      {target.blocks, static_cast<int64_t>(target.bytes_per_token) * o.block_size}};
  auto bytes = [&](int64_t n) {
    int64_t total = n * block_bytes;
    for (const auto& [blocks, block] : windows) total += std::min(blocks, n) * block;
    return total;
  };
  const int64_t ids = std::min(o.max_num_seqs * ((o.context_window + o.block_size - 1) / o.block_size),
                               budget / Engine::kBlockIdBytes);
  // bytes(lo) fits; the answer is at most hi (block ids are int32)
  int64_t lo = 0, hi = std::min<int64_t>(block_bytes > 0 ? budget / block_bytes : ids, std::numeric_limits<int32_t>::max());
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (bytes(mid) <= budget) lo = mid;
    else hi = mid - 1;
  }
  if (lo < 1) fail("--kv-memory ", budget, " bytes holds no KV block of ", bytes(1), " bytes");
  return lo;
}

// Snapshot slots of a hybrid model's state cache: the slot cap, further bounded by the memory
// they may take (pages are committed only as snapshots are taken).
int64_t snapshot_slots(const ModelConfig& cfg, const EngineOptions& o) {
  const auto slot_bytes = static_cast<int64_t>(recurrent_state_floats(cfg) * sizeof(float));
  if (slot_bytes == 0 || !o.prefix_cache) return 0;
  if (o.state_snapshot_slots < 0) fail("state snapshot slots must be >= 0, got ", o.state_snapshot_slots);
  int64_t budget = o.state_snapshot_memory_bytes;
  if (budget < 0) fail("--state-snapshot-memory must be >= 0, got ", budget);
  if (budget == 0) {
    if (!(o.state_snapshot_memory_fraction >= 0 && o.state_snapshot_memory_fraction <= 1))
      fail("the state snapshot memory fraction must be in [0, 1], got ", o.state_snapshot_memory_fraction);
    budget = static_cast<int64_t>(static_cast<double>(available_memory_bytes()) * o.state_snapshot_memory_fraction);
  }
  return std::min(o.state_snapshot_slots, budget / slot_bytes);
}

// A hybrid model's state slots: one live per sequence, prefix snapshots, and with speculation
// k scratch slots per sequence for the states after each draft (bounded like the snapshots;
// pages are committed only when used).
std::unique_ptr<StateCache> make_states(const ModelConfig& cfg, const EngineOptions& o, int32_t max_draft) {
  const int64_t floats = recurrent_state_floats(cfg);
  if (floats == 0) return nullptr;
  int64_t scratch = 0;
  if (max_draft > 0) {
    EngineOptions bound = o;
    bound.prefix_cache = true;
    bound.state_snapshot_slots = int64_t{max_draft} * o.max_num_seqs;
    scratch = std::max<int64_t>(max_draft, snapshot_slots(cfg, bound));
  }
  return std::make_unique<StateCache>(floats, o.max_num_seqs, snapshot_slots(cfg, o), scratch);
}

// Tokens of context whose attention costs as much as one token through the weights, counted
// in multiply-adds: a token's weights (attention or Gated DeltaNet projections, the dense or
// routed MLP) against 2 x heads x head_dim per key in each full-attention layer (QK and PV).
// The scheduler shrinks prefill chunks by it as the context grows.
int64_t attention_span(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  double weights = 0;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (c.is_full_attention(layer)) {
      const int64_t q = c.num_heads * c.head_dim * (c.attn_output_gate ? 2 : 1);
      weights += static_cast<double>(h * (q + 2 * c.num_kv_heads * c.head_dim) + c.num_heads * c.head_dim * h);
    } else {
      const int64_t k = c.linear_num_key_heads * c.linear_key_head_dim, v = c.linear_num_value_heads * c.linear_value_head_dim;
      weights += static_cast<double>(h * (2 * k + 2 * v + 2 * c.linear_num_value_heads) + v * h);
    }
    const int64_t mlp = c.is_sparse_layer(layer)
                            ? c.num_experts_per_tok * c.moe_intermediate_size + c.shared_expert_intermediate_size
                            : c.intermediate_size;
    weights += 3.0 * static_cast<double>(h * mlp);
  }
  const auto per_key = static_cast<double>(2 * c.num_heads * c.head_dim * c.num_kv_layers());
  return per_key > 0 ? std::max<int64_t>(1, static_cast<int64_t>(weights / per_key)) : 0;
}

// log-softmax of the raw logits, for logprobs (before penalties or temperature).
GeneratedToken with_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t top) {
  GeneratedToken g;
  g.token = token;
  const float max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - max_logit));
  const auto log_z = static_cast<float>(std::log(sum)) + max_logit;
  g.logprob = logits[token] - log_z;
  if (top > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < static_cast<int32_t>(vocab); ++i) ids[static_cast<size_t>(i)] = i;
    const auto k = static_cast<size_t>(std::min<int64_t>(top, vocab));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (size_t i = 0; i < k; ++i) g.top.push_back({ids[i], logits[ids[i]] - log_z});
  }
  return g;
}

std::unique_ptr<spec::Proposer> make_proposer(const spec::SpeculativeConfig& c, Model& target, const EngineOptions& o) {
  if (!c.enabled()) return nullptr;
  c.validate();
  if (c.method == "draft_model")
    return std::make_unique<spec::DraftModelProposer>(
        target, spec::DraftModelOptions{.path = c.model, .n_threads = target.pool().size(), .shared_pool = &target.pool(),
                                        .kv_dtype = o.kv_dtype, .block_size = o.block_size});
  if (c.method == "mtp") return std::make_unique<spec::MtpProposer>(target);
  if (c.method == "dflash") {
    if (c.model.empty())
      fail("--speculative-config method dflash needs \"model\": the drafter folder (or --dflash with a model folder ",
           "that carries dflash2/ or dflash/)");
    return std::make_unique<spec::dflash::DFlashProposer>(target, c.model, c.quantization == "q8_0");
  }
  if (c.method == "ngram") return std::make_unique<spec::NgramProposer>(spec::NgramOptions{c.prompt_lookup_min, c.prompt_lookup_max});
  if (c.method == "suffix") {
    spec::SuffixOptions o;
    o.max_tree_depth = c.suffix_max_tree_depth;
    o.max_spec_factor = c.suffix_max_spec_factor;
    o.min_token_prob = c.suffix_min_token_prob;
    o.max_cached_tokens = c.suffix_max_cached_tokens;
    return std::make_unique<spec::SuffixProposer>(o);
  }
  fail("speculative method ", c.method, " is not available in this build");
}

}  // namespace

void EngineOptions::validate() const {
  auto in_range = [](const char* flag, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) fail("--", flag, " must be in [", lo, ", ", hi, "], got ", v);
  };
  in_range("max-num-seqs", max_num_seqs, 1, kMaxNumSeqs);
  in_range("max-num-batched-tokens", max_num_batched_tokens, 1, kMaxBatchedTokens);
  in_range("max-waiting", max_waiting, 1, kMaxWaiting);
  in_range("context-window", context_window, 0, kMaxContextWindow);
  in_range("long-prefill-token-threshold", long_prefill_token_threshold, 0, max_num_batched_tokens);
  in_range("max-num-partial-prefills", max_num_partial_prefills, 1, kMaxNumSeqs);
  in_range("max-long-partial-prefills", max_long_partial_prefills, 1, max_num_partial_prefills);
  in_range("kv-memory", kv_memory_bytes, 0, std::numeric_limits<int64_t>::max());
  in_range("state-snapshot-memory", state_snapshot_memory_bytes, 0, std::numeric_limits<int64_t>::max());
  if (block_size <= 0) fail("block size must be positive, got ", block_size);
}

struct Engine::Impl {
  Impl(Model& model, const EngineOptions& o, std::unique_ptr<spec::Proposer> p, DraftKv draft, TargetWindowKv window)
      : cfg(model.config()),
        target_window(std::move(window)),
        kv(target_window.main, kv_blocks(target_window.main, o, draft, target_window), o.kv_dtype, o.block_size),
        blocks(kv.num_blocks(), o.block_size, o.prefix_cache),
        states(make_states(cfg, o, o.speculative.enabled() ? o.speculative.k() : 0)),
        scheduler(SchedulerConfig{.max_num_seqs = o.max_num_seqs,
                                  .max_num_batched_tokens = o.max_num_batched_tokens,
                                  .long_prefill_token_threshold = o.long_prefill_token_threshold,
                                  .max_num_partial_prefills = o.max_num_partial_prefills,
                                  .max_long_partial_prefills = o.max_long_partial_prefills,
                                  .attention_span = attention_span(cfg),
                                  .state_align = states ? kGatedDeltaNetChunk : 0},
                  blocks, states.get()),
        runner(model, kv, states ? &states->pool() : nullptr),
        proposer(std::move(p)) {
    if (target_window.window > 0) {
      const int64_t n = std::min(target_window.blocks, kv.num_blocks());  // never more than the main pool's
      window_kv = std::make_unique<KvPool>(target_window.layers, n, o.kv_dtype, o.block_size);
      windows = std::make_unique<WindowBlocks>(n, kv.num_blocks(), o.block_size, target_window.window);
      runner.set_windows(window_kv.get(), windows.get());
      scheduler.set_windows(windows.get());
    }
    if (proposer) {
      // as many tokens as the target's cache
      proposer->reserve_kv_blocks(kv.num_blocks(), o.block_size, o.max_num_seqs);
      runner.set_tap_layers(proposer->tap_layers());
    }
    draft_window_bytes = draft.window.bytes_per_token * static_cast<size_t>(o.block_size) *
                         static_cast<size_t>(std::min(draft.window.blocks, kv.num_blocks()));
    if ((draft.per_token > 0 || draft.window.blocks > 0) && KvPool::bytes_per_token(cfg, o.kv_dtype) > 0)
      kv_tokens_without_drafter = kv_blocks(target_window.main, o, {}, target_window) * o.block_size;
    if (!o.speculative.synthetic_acceptance_rates.empty())
      verifier.set_synthetic(o.speculative.synthetic_acceptance_rates, 0x5EEDULL);
    if (proposer) {
      controller = std::make_unique<spec::Controller>(spec::ControllerOptions{
          .adaptive = o.speculative.adaptive, .num_speculative_tokens = o.speculative.k()});
      if (!o.spec_trace_path.empty()) {
        trace.open(o.spec_trace_path);
        if (!trace) fail("cannot write the speculation trace ", o.spec_trace_path);
      }
    }
  }

  // Whether the main pool keeps K/V (on any pipeline stage), or holds block ids only.
  bool main_pool_keeps_kv() const { return KvPool::bytes_per_token(target_window.main, kv.dtype()) > 0; }
  // Drafts for the running decodes, as many as the controller finds worth verifying.
  void draft(const EngineOptions& o, int64_t context_window);
  // Records a verification for the counters, the controller and the trace.
  void record_verify(const Sequence& seq, int64_t pos, std::span<const int32_t> draft, const spec::Verdict& v);
  // The trace's line for a whole step (after its verifications): what the controller decided
  // and measured, so its cost model can be checked against the steps it priced.
  void trace_step(int64_t tokens, int64_t emitted, double draft_seconds, double seconds);

  const ModelConfig& cfg;
  TargetWindowKv target_window;
  KvPool kv;                                // every KV layer, or those without a window
  std::unique_ptr<KvPool> window_kv;        // the sliding layers, when kept apart
  std::unique_ptr<WindowBlocks> windows;    // and which of its blocks hold what
  BlockManager blocks;
  std::unique_ptr<StateCache> states;
  Scheduler scheduler;
  ModelRunner runner;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs;  // engine thread only
  std::unique_ptr<spec::Proposer> proposer;  // null: no speculation
  int64_t kv_tokens_without_drafter = 0;      // a proposer's KV shares the budget
  size_t draft_window_bytes = 0;               // of which this much whatever the context length
  std::unique_ptr<spec::Controller> controller;
  spec::Verifier verifier;
  std::ofstream trace;
  int64_t step_index = 0;
  std::vector<int32_t> draft_scratch;

  mutable std::mutex mu;  // guards everything below
  std::condition_variable wake;
  std::vector<std::unique_ptr<Sequence>> incoming;
  std::vector<uint64_t> aborts;
  uint64_t next_id = 1;
  bool stopping = false;
  EngineStats stats;
  EngineStats spec_delta;  // this step's speculation counters, merged into stats under mu
  std::thread thread;
  std::mutex step_mu;  // one step at a time (background thread or caller)
};

Engine::Engine(Model& model, const EngineOptions& options) : model_(model), options_(options) {
  options_.validate();
  if (options_.context_window <= 0)  // the model's own length, within what a request may hold
    options_.context_window = std::min(model.config().max_position_embeddings, EngineOptions::kMaxContextWindow);
  if (options_.context_window <= 0) fail("the model states no context length; pass --context-window");
  // Hybrids keep a live recurrent state per running sequence (150 MB for Zen6): all of them
  // must fit before any is allocated.
  const auto state_bytes = static_cast<double>(recurrent_state_floats(model.config()) * sizeof(float));
  if (const double need = state_bytes * static_cast<double>(options_.max_num_seqs);
      need > static_cast<double>(available_memory_bytes()))
    fail("--max-num-seqs ", options_.max_num_seqs, " needs ", need / (1 << 30), " GiB of recurrent state (",
         state_bytes / (1 << 20), " MiB per sequence); ", static_cast<double>(available_memory_bytes()) / (1 << 30),
         " GiB are available");
  std::unique_ptr<spec::Proposer> proposer = make_proposer(options_.speculative, model, options_);
  const DraftKv draft_kv{.per_token = proposer ? proposer->kv_bytes_per_token() : 0,
                        .window = proposer ? proposer->window_kv(options_.max_num_seqs, options_.block_size)
                                           : spec::Proposer::WindowKv{}};
  if (const int32_t most = proposer ? proposer->max_draft_tokens() : 0; most > 0) {
    if (options_.speculative.num_speculative_tokens > most)
      fail("--speculative-config: num_speculative_tokens ", options_.speculative.num_speculative_tokens, " exceeds what the ",
           proposer->name(), " proposer drafts per step (", most, ")");
    if (options_.speculative.num_speculative_tokens == 0) options_.speculative.num_speculative_tokens = most;
  }
  impl_ = std::make_unique<Impl>(model, options_, std::move(proposer), draft_kv, target_window_kv(model, options_));
  const int64_t longest = impl_->blocks.num_blocks() * options_.block_size;
  if (options_.context_window > longest) options_.context_window = longest;
  impl_->stats.kv_blocks_total = impl_->blocks.num_blocks();
  impl_->stats.kv_block_size = options_.block_size;
}

Engine::~Engine() { stop(); }

int64_t Engine::context_window() const { return options_.context_window; }
int64_t Engine::kv_capacity_tokens() const { return impl_->blocks.num_blocks() * options_.block_size; }

std::string Engine::describe() const {
  std::ostringstream s;
  const double gib = static_cast<double>(impl_->kv.bytes_per_block()) * static_cast<double>(impl_->kv.num_blocks()) /
                     static_cast<double>(int64_t{1} << 30);
  s.setf(std::ios::fixed);
  s.precision(2);
  if (!impl_->main_pool_keeps_kv())
    s << "KV cache: " << (impl_->window_kv ? "no layer keeps every position" : "no layer keeps K/V")
      << "; block tables for " << kv_capacity_tokens() << " tokens (" << impl_->kv.num_blocks() << " blocks of "
      << options_.block_size << ")\n";
  else
    s << "KV cache: " << kv_capacity_tokens() << " tokens (" << impl_->kv.num_blocks() << " blocks of "
      << options_.block_size << ", " << kv_dtype_name(impl_->kv.dtype()) << ", " << gib << " GiB)\n";
  s
    << "Maximum concurrency for " << context_window() << " tokens per request: "
    << static_cast<double>(kv_capacity_tokens()) / static_cast<double>(context_window()) << "x\n";
  if (impl_->window_kv) {
    const KvPool& w = *impl_->window_kv;
    const ModelConfig& c = impl_->cfg;
    if (c.kv_budget_window_layers > 0 || c.kv_budget_other_layers > 0)  // pipeline stages
      s << "Sliding-window layers: at most " << c.kv_budget_window_layers << " KV layers a stage keep their last ";
    else
      s << "Sliding-window layers: " << w.num_layers() << " of " << c.num_kv_layers() << " KV layers keep their last ";
    // The most any stage's window pool takes (KvPool::bytes_per_token counts the stages' most).
    const double bytes = static_cast<double>(impl_->target_window.bytes_per_token) *
                         static_cast<double>(options_.block_size * w.num_blocks());
    s << impl_->windows->window() << " positions apart, " << w.num_blocks() << " blocks (" << bytes / (1 << 20) << " MiB) for "
      << options_.max_num_seqs << " sequences, whatever the context length\n";
  }
  s
    << "Packed matmul kernels: " << kernels::PackedMatrix::isa();
  if (impl_->proposer) {
    s << "\n" << (options_.speculative.enabled() ? options_.speculative.describe()
                                                 : "Speculative decoding: " + std::string(impl_->proposer->name()));
    if (impl_->controller && !impl_->controller->options().adaptive) s << " (k pinned)";
    const double ctx = static_cast<double>(context_window());
    if (impl_->kv_tokens_without_drafter > 0) {
      // What speculation costs in memory: the draft's KV shares the budget.
      s << "\nKV cost of the drafter: " << kv_capacity_tokens() << " tokens ("
        << static_cast<double>(kv_capacity_tokens()) / ctx << "x concurrency at " << context_window()
        << " tokens) with it, " << impl_->kv_tokens_without_drafter << " tokens ("
        << static_cast<double>(impl_->kv_tokens_without_drafter) / ctx << "x) without";
      if (impl_->draft_window_bytes > 0)
        s << "; its sliding layers keep their windows in " << static_cast<double>(impl_->draft_window_bytes) / (1 << 20)
          << " MiB for " << options_.max_num_seqs << " sequences, whatever the context length";
    } else {
      s << "; the proposer keeps no KV: the same " << kv_capacity_tokens() << " tokens and "
        << static_cast<double>(kv_capacity_tokens()) / ctx << "x concurrency as without it";
    }
  }
  if (impl_->states) {
    const StatePool& p = impl_->states->pool();
    const int64_t snapshots = p.num_slots() - options_.max_num_seqs;
    s << "\nRecurrent state: " << p.bytes_per_slot() << " bytes per sequence, " << p.num_slots() << " slots ("
      << snapshots << " for prefix snapshots, up to "
      << static_cast<double>(snapshots) * static_cast<double>(p.bytes_per_slot()) / (1 << 30)
      << " GiB)";
  }
  return s.str();
}

AddResult Engine::add(std::vector<int32_t> prompt, const RequestParams& params, Callback on_update) {
  AddResult r;
  const int64_t vocab = model_.config().vocab_size;
  const auto n = static_cast<int64_t>(prompt.size());
  try {
    params.sampling.validate();
  } catch (const Error& e) {
    return {AddStatus::Invalid, 0, e.what()};
  }
  if (n == 0) return {AddStatus::Invalid, 0, "the prompt is empty"};
  for (int32_t t : prompt)
    if (t < 0 || t >= vocab)
      return {AddStatus::Invalid, 0, "token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                         std::to_string(vocab) + ")"};
  for (const auto& [t, bias] : params.sampling.logit_bias)
    if (t >= vocab)
      return {AddStatus::Invalid, 0, "logit_bias: token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                         std::to_string(vocab) + ")"};
  if (params.max_tokens < 1) return {AddStatus::Invalid, 0, "max_tokens must be at least 1"};
  if (params.top_logprobs > 20) return {AddStatus::Invalid, 0, "top_logprobs must be at most 20"};
  if (n + params.max_tokens > context_window())
    return {AddStatus::TooLong, 0,
            "prompt " + std::to_string(n) + " tokens + max_tokens " + std::to_string(params.max_tokens) +
                " exceeds the context window of " + std::to_string(context_window()) + " tokens"};

  auto seq = std::make_unique<Sequence>();
  seq->tokens = std::move(prompt);
  seq->prompt_len = n;
  seq->params = params;
  seq->sampler = std::make_unique<Sampler>(params.sampling, seq->tokens);
  if (params.grammar) {
    if (params.grammar->vocab().size() > vocab)
      return {AddStatus::Invalid, 0, "the grammar was compiled for a larger vocabulary than the model's"};
    seq->sampler->set_grammar(std::make_unique<grammar::Matcher>(params.grammar));
  }
  seq->on_update = std::move(on_update);
  seq->arrival = Sequence::Clock::now();
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping) return {AddStatus::Stopped, 0, "the engine is shutting down"};
    if (impl_->stats.waiting + static_cast<int64_t>(impl_->incoming.size()) >= options_.max_waiting)
      return {AddStatus::QueueFull, 0, "the request queue is full (" + std::to_string(options_.max_waiting) + " waiting)"};
    seq->id = impl_->next_id++;
    r.id = seq->id;
    impl_->incoming.push_back(std::move(seq));
  }
  impl_->wake.notify_one();
  return r;
}

void Engine::abort(uint64_t id) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->aborts.push_back(id);
  }
  impl_->wake.notify_one();
}

void Engine::use_proposer(std::unique_ptr<spec::Proposer> proposer, const spec::ControllerOptions& control) {
  std::lock_guard step_lock(impl_->step_mu);
  // A pool of block ids only (its count bounded by their bookkeeping, not by KV bytes) would
  // give a proposer that keeps KV per token room for far more tokens than the budget holds.
  if (proposer && proposer->kv_bytes_per_token() > 0 && !impl_->main_pool_keeps_kv())
    fail("a proposer that keeps KV per token must be configured when the engine is built (--speculative-config), "
         "not added to one whose main pool keeps no K/V");
  if (impl_->states) {  // room for the states after each draft (nothing runs yet)
    impl_->states = make_states(impl_->cfg, options_, proposer ? control.num_speculative_tokens : 0);
    impl_->scheduler.set_states(impl_->states.get());
    impl_->runner.set_states(&impl_->states->pool());
  }
  impl_->proposer = std::move(proposer);
  impl_->controller = impl_->proposer ? std::make_unique<spec::Controller>(control) : nullptr;
  // A proposer given here takes no share of the budget the pool was sized with.
  if (impl_->proposer) impl_->proposer->reserve_kv_blocks(impl_->kv.num_blocks(), options_.block_size, options_.max_num_seqs);
  impl_->runner.set_tap_layers(impl_->proposer ? impl_->proposer->tap_layers() : std::span<const int32_t>());
}

const spec::Controller* Engine::controller() const { return impl_->controller.get(); }

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

namespace {

void send(Sequence& seq, RequestUpdate& u) {
  u.id = seq.id;
  u.prompt_tokens = seq.prompt_len;
  u.cached_prompt_tokens = seq.cached_prompt;
  u.completion_tokens = seq.generated();
  u.first_token_seconds = std::max(0.0, seq.first_token_seconds);
  u.spec_draft_tokens = seq.drafted_total;
  u.spec_accepted_tokens = seq.accepted_total;
  if (seq.on_update) seq.on_update(u);
}

}  // namespace

void Engine::Impl::draft(const EngineOptions& o, int64_t context_window) {
  if (!proposer) return;
  std::vector<Sequence*> cand_seqs;
  std::vector<spec::Controller::Candidate> cands;
  int64_t decodes = 0, prefill_tokens = 0;
  for (Sequence* seq : scheduler.running()) {
    if (!seq->decoding()) {
      prefill_tokens += seq->uncomputed();
      continue;
    }
    ++decodes;
    // Room for drafts: every verified draft may become output, so stay within max_tokens and
    // the context window (the decoded token itself takes one of each).
    const int64_t room = std::min(seq->params.max_tokens - seq->generated(),
                                  context_window - static_cast<int64_t>(seq->tokens.size())) - 1;
    cand_seqs.push_back(seq);
    spec::Controller::Candidate c{seq->id, static_cast<int32_t>(std::clamp<int64_t>(room, 0, spec::kMaxDraftTokens))};
    if (c.max_k > 0) {
      c.one_off_seconds = proposer->catch_up_seconds(seq->id, seq->tokens);
      c.horizon_tokens = room + 1;
    }
    cands.push_back(c);
  }
  if (cands.empty()) return;
  // Drafts only take what prompts leave of the step's token budget, so time to first token is
  // what it would be without speculation (on a CPU a step's time grows with every token).
  if (scheduler.num_running() < o.max_num_seqs)  // queued prompts count only if one could start
    for (const Sequence* seq : scheduler.waiting()) prefill_tokens += seq->uncomputed();
  const int64_t prefill_share = std::min(prefill_tokens, o.max_num_batched_tokens - decodes);
  const int64_t budget = o.max_num_batched_tokens - decodes - prefill_share;
  const int64_t other = (decodes - static_cast<int64_t>(cands.size())) + prefill_share;
  if (budget <= 0) return;
  controller->choose(cands, other, budget, [this](int64_t seqs, int32_t k) { return proposer->cost_seconds(seqs, k); });

  std::vector<spec::DraftSlot> slots;
  std::vector<size_t> slot_of;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (cands[i].max_k <= 0) continue;
    spec::DraftSlot slot;
    slot.seq_id = cand_seqs[i]->id;
    slot.tokens = cand_seqs[i]->tokens;
    slot.prompt_len = cand_seqs[i]->prompt_len;
    slot.max_tokens = cands[i].max_k;
    slot.sampling = &cand_seqs[i]->params.sampling;
    slot.kv_blocks = cand_seqs[i]->blocks;
    slots.push_back(std::move(slot));
    slot_of.push_back(i);
  }
  if (slots.empty()) return;
  proposer->propose(slots);
  // A draft token the grammar forbids ends the draft: it could never be accepted.
  for (size_t j = 0; j < slots.size(); ++j)
    if (grammar::Matcher* g = cand_seqs[slot_of[j]]->sampler->grammar()) {
      const size_t ok = g->allowed_prefix(slots[j].draft);
      slots[j].draft.resize(ok);
      if (!slots[j].q.empty()) slots[j].q.resize(ok * static_cast<size_t>(cfg.vocab_size));
    }
  // With the drafts in hand (their cost sunk), choose again how many of each to verify.
  for (auto& c : cands) c.max_k = 0;
  for (size_t j = 0; j < slots.size(); ++j)
    cands[slot_of[j]].max_k = static_cast<int32_t>(std::min<size_t>(slots[j].draft.size(), static_cast<size_t>(slots[j].max_tokens)));
  controller->choose(cands, other, budget);
  const auto vocab = static_cast<size_t>(cfg.vocab_size);
  for (size_t j = 0; j < slots.size(); ++j) {
    Sequence& seq = *cand_seqs[slot_of[j]];
    auto k = static_cast<size_t>(cands[slot_of[j]].max_k);
    if (k > 0 && states) {  // the state after each verified token but the last needs a slot
      states->take_scratch(static_cast<int64_t>(k), seq.draft_states);
      k = seq.draft_states.size();
    }
    if (k == 0) continue;
    seq.tokens.insert(seq.tokens.end(), slots[j].draft.begin(), slots[j].draft.begin() + static_cast<std::ptrdiff_t>(k));
    seq.num_draft = static_cast<int32_t>(k);
    if (!slots[j].q.empty()) seq.draft_q.assign(slots[j].q.begin(), slots[j].q.begin() + static_cast<std::ptrdiff_t>(k * vocab));
  }
}

void Engine::Impl::trace_step(int64_t tokens, int64_t emitted, double draft_seconds, double seconds) {
  char line[320];
  std::snprintf(line, sizeof line,
                "{\"kind\":\"step\",\"step\":%lld,\"tokens\":%lld,\"draft_tokens\":%lld,\"emitted\":%lld,"
                "\"mean_k\":%.3f,\"draft_seconds\":%.6f,\"seconds\":%.6f,\"predicted_seconds\":%.6f}\n",
                static_cast<long long>(step_index), static_cast<long long>(tokens),
                static_cast<long long>(spec_delta.spec_draft_tokens), static_cast<long long>(emitted), controller->mean_k(),
                draft_seconds, seconds, controller->cost().predict(tokens));
  trace << line;
}

void Engine::Impl::record_verify(const Sequence& seq, int64_t pos, std::span<const int32_t> draft, const spec::Verdict& v) {
  const auto k = static_cast<int32_t>(draft.size());
  if (k == 0) return;
  // A stop inside the accepted run leaves later positions untried, not rejected.
  controller->record_verify(seq.id, v.emitted > v.accepted ? k : v.accepted, v.accepted);
  spec_delta.spec_drafts += 1;
  spec_delta.spec_draft_tokens += k;
  spec_delta.spec_accepted_tokens += v.accepted;
  for (int32_t i = 0; i < v.accepted; ++i) spec_delta.spec_accepted_per_pos[static_cast<size_t>(i)] += 1;
  if (trace.is_open()) {
    trace << "{\"kind\":\"verify\",\"step\":" << step_index << ",\"seq\":" << seq.id << ",\"pos\":" << pos << ",\"drafted\":" << k
          << ",\"accepted\":" << v.accepted << ",\"draft\":[";
    for (int32_t i = 0; i < k; ++i) trace << (i ? "," : "") << draft[static_cast<size_t>(i)];
    trace << "]}\n";
  }
}

bool Engine::step() {
  std::lock_guard step_lock(impl_->step_mu);
  Impl& m = *impl_;
  std::vector<std::unique_ptr<Sequence>> incoming;
  std::vector<uint64_t> aborts;
  {
    std::lock_guard lock(m.mu);
    incoming.swap(m.incoming);
    aborts.swap(m.aborts);
  }
  for (auto& seq : incoming) {
    m.scheduler.add(seq.get());
    m.seqs[seq->id] = std::move(seq);
  }
  int64_t finished[4] = {0, 0, 0, 0};  // stop, length, abort, error
  auto finish = [&](Sequence& seq, const std::string& reason, RequestUpdate u, const std::string& error = "") {
    m.scheduler.remove(&seq);
    if (m.proposer) {
      m.proposer->finish(seq.id, seq.tokens, seq.prompt_len);
      m.controller->forget(seq.id);
    }
    u.finished = true;
    u.finish_reason = reason;
    u.error = error;
    send(seq, u);
    finished[reason == "stop" ? 0 : reason == "length" ? 1 : reason == "abort" ? 2 : 3]++;
    m.seqs.erase(seq.id);
  };
  for (uint64_t id : aborts)
    if (auto it = m.seqs.find(id); it != m.seqs.end()) finish(*it->second, "abort", {});

  const auto step_start = Sequence::Clock::now();
  try {
    m.draft(options_, context_window());
  } catch (const std::exception& e) {
    // A proposer failed: this step decodes without drafts (speculation is only ever a bonus).
    std::fprintf(stderr, "zen: speculative proposer failed, decoding without drafts this step: %s\n", e.what());
    for (Sequence* seq : m.scheduler.running()) {
      seq->drop_drafts();
      if (m.states) m.states->return_scratch(seq->draft_states);
      seq->draft_states.clear();
    }
  }
  const double draft_seconds = std::chrono::duration<double>(Sequence::Clock::now() - step_start).count();
  std::vector<ScheduledSeq> plan = m.scheduler.schedule();
  // Drafts the budget left out are forgotten; verified ones need a logits row per token.
  for (Sequence* seq : m.scheduler.running()) {
    auto it = std::find_if(plan.begin(), plan.end(), [seq](const ScheduledSeq& s) { return s.seq == seq; });
    if (it == plan.end()) seq->drop_drafts();
    else if (seq->num_draft > 0) {
      seq->drop_drafts(static_cast<int32_t>(it->n_tokens - (seq->uncomputed() - seq->num_draft)));
      it->all_logits = seq->num_draft > 0;
    }
    if (m.states && seq->draft_states.size() > static_cast<size_t>(seq->num_draft)) {
      const std::span<const int32_t> spare = std::span<const int32_t>(seq->draft_states).subspan(static_cast<size_t>(seq->num_draft));
      m.states->return_scratch(spare);
      seq->draft_states.resize(static_cast<size_t>(seq->num_draft));
    }
  }
  int64_t generated = 0, prompt_tokens = 0, cached = 0;
  m.spec_delta = {};
  if (!plan.empty()) {
    float* logits = nullptr;
    std::string error;
    int64_t step_tokens = 0;
    for (const ScheduledSeq& s : plan) step_tokens += s.n_tokens;
    const auto t0 = Sequence::Clock::now();
    try {
      logits = m.runner.run(plan, m.scheduler.running());
    } catch (const std::exception& e) {
      error = e.what();
    }
    const int64_t vocab = model_.config().vocab_size;
    const int64_t bs = options_.block_size;
    auto register_blocks = [&](Sequence& seq) {  // full blocks become findable by later requests
      while (static_cast<int64_t>(seq.block_hashes.size() + 1) * bs <= seq.computed) {
        const size_t b = seq.block_hashes.size();
        const uint64_t parent = b == 0 ? 0 : seq.block_hashes.back();
        const auto block_tokens = std::span<const int32_t>(seq.tokens).subspan(b * static_cast<size_t>(bs), static_cast<size_t>(bs));
        seq.block_hashes.push_back(m.blocks.register_full(seq.blocks[b], parent, block_tokens));
      }
    };
    // Per-request work inside the step that does not scale with its rows (finishing a request,
    // recurrent-state snapshots for the prefix cache): kept out of the controller's step cost.
    double aside = 0;
    auto set_aside = [&aside](auto&& work) {
      const auto t = Sequence::Clock::now();
      work();
      aside += std::chrono::duration<double>(Sequence::Clock::now() - t).count();
    };
    // Rows that became final, for a proposer reading the target's hidden states.
    std::vector<spec::CommittedRows> committed;
    const bool taps = m.proposer && !m.proposer->tap_layers().empty();
    auto commit_rows = [&](const Sequence& seq, size_t i, int64_t from) {
      if (taps && seq.computed > from)
        committed.push_back({seq.id, seq.blocks, seq.tokens, from, m.runner.first_token(i), seq.computed - from});
    };
    for (size_t i = 0; i < plan.size(); ++i) {
      Sequence& seq = *plan[i].seq;
      if (!error.empty()) {
        finish(seq, "error", {}, error);
        continue;
      }
      const int64_t computed_before = seq.computed;
      seq.computed += plan[i].n_tokens;
      if (seq.uncomputed() > 0) {  // prefill continues next step
        commit_rows(seq, i, computed_before);
        register_blocks(seq);
        if (m.states && seq.computed % kGatedDeltaNetChunk == 0 && seq.computed % bs == 0 && options_.prefix_cache)
          set_aside([&] { m.states->save_snapshot(seq.block_hashes[static_cast<size_t>(seq.computed / bs - 1)], seq.state_slot); });
        continue;
      }
      // The last token and its drafts ran: verify (with no drafts, this is plain sampling).
      const int32_t k = seq.num_draft;
      m.draft_scratch.assign(seq.tokens.end() - k, seq.tokens.end());
      const int64_t base = static_cast<int64_t>(seq.tokens.size()) - k;  // tokens through the last real one
      seq.tokens.resize(static_cast<size_t>(base));
      std::vector<float> q = std::move(seq.draft_q);  // moved, not copied: [k, vocab]
      seq.num_draft = 0;
      seq.draft_q.clear();
      const float* rows = logits + (m.runner.first_row(i) + (plan[i].all_logits ? plan[i].n_tokens - 1 - k : 0)) * vocab;
      RequestUpdate u;
      std::string reason;
      const auto& eos = model_.config().eos_token_ids;
      const spec::Verdict v = m.verifier.verify(*seq.sampler, rows, vocab, m.draft_scratch, q, [&](int32_t t, int64_t row) {
        GeneratedToken g;
        g.token = t;
        if (seq.params.top_logprobs >= 0) g = with_logprobs(rows + row * vocab, vocab, t, seq.params.top_logprobs);
        seq.tokens.push_back(t);
        u.tokens.push_back(std::move(g));
        ++generated;
        const bool is_stop =
            std::find(seq.params.stop_token_ids.begin(), seq.params.stop_token_ids.end(), t) != seq.params.stop_token_ids.end() ||
            (!seq.params.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end());
        if (is_stop) reason = "stop";
        else if (seq.generated() >= seq.params.max_tokens || static_cast<int64_t>(seq.tokens.size()) >= context_window())
          reason = "length";
        return reason.empty();
      });
      if (seq.first_token_seconds < 0) {
        seq.first_token_seconds = std::chrono::duration<double>(Sequence::Clock::now() - seq.arrival).count();
        prompt_tokens += seq.prompt_len;
        cached += seq.cached_prompt;
      }
      seq.drafted_total += k;
      seq.accepted_total += v.accepted;
      if (m.proposer) m.record_verify(seq, base, m.draft_scratch, v);
      if (!reason.empty()) {
        set_aside([&] { finish(seq, reason, std::move(u)); });
        continue;
      }
      // Accepted drafts keep their KV; rejected positions are forgotten (blocks past the end
      // go back to the pool, hashes only ever cover computed tokens).
      seq.computed = base + std::min(v.emitted, v.accepted);
      m.scheduler.rollback(&seq, static_cast<int64_t>(seq.tokens.size()));
      commit_rows(seq, i, computed_before);
      register_blocks(seq);
      if (m.states) {
        // The live state is the one after the last draft; the one after the last kept token
        // was recorded in a scratch slot (index 0: after the token before the drafts).
        const auto kept = static_cast<size_t>(std::min(v.emitted, v.accepted));
        // A snapshot boundary inside the accepted run (plain decoding would have stopped on
        // it): the state there is in the slot of the token that reached it.
        const int64_t every = std::lcm(kGatedDeltaNetChunk, bs);
        if (options_.prefix_cache)
          for (int64_t b = (base + every - 1) / every * every; b <= seq.computed; b += every) {
            const auto i = static_cast<size_t>(b - base);  // after slice token i, computed == b
            set_aside([&] {
              m.states->save_snapshot(seq.block_hashes[static_cast<size_t>(b / bs - 1)],
                                      i < seq.draft_states.size() ? seq.draft_states[i] : seq.state_slot);
            });
          }
        if (kept < seq.draft_states.size()) m.states->pool().copy(seq.draft_states[kept], seq.state_slot);
        m.states->return_scratch(seq.draft_states);
        seq.draft_states.clear();
      }
      if (m.proposer) m.proposer->observe(seq.id, seq.tokens, seq.prompt_len, k, v.accepted);
      send(seq, u);
    }
    // A step's cost for the controller: the forward and what every row costs after it
    // (sampling, verification, logprobs, streaming), which plain decoding pays per token too.
    if (m.controller && error.empty()) {
      const double seconds = std::chrono::duration<double>(Sequence::Clock::now() - t0).count() - aside;
      if (m.trace.is_open()) m.trace_step(step_tokens, generated, draft_seconds, seconds);
      m.controller->record_step(step_tokens, seconds);
    }
    if (!committed.empty()) {
      try {
        m.proposer->commit(committed, m.runner.taps());
      } catch (const std::exception& e) {
        // Its context would now be wrong for these sequences: stop speculating rather than
        // draft from it (greedy output would stay exact, but every draft would be wasted).
        std::fprintf(stderr, "zen: speculative proposer failed to record the step, speculation is off from now: %s\n", e.what());
        m.proposer.reset();
        m.controller.reset();
        m.runner.set_tap_layers({});
      }
    }
  }
  ++m.step_index;
  {
    std::lock_guard lock(m.mu);
    EngineStats& s = m.stats;
    s.running = m.scheduler.num_running();
    s.waiting = m.scheduler.num_waiting();
    s.kv_blocks_used = m.blocks.num_used();
    s.prompt_tokens += prompt_tokens;
    s.cached_prompt_tokens += cached;
    s.generated_tokens += generated;
    s.preemptions = m.scheduler.preemptions();
    s.steps += plan.empty() ? 0 : 1;
    s.finished_stop += finished[0];
    s.finished_length += finished[1];
    s.finished_abort += finished[2];
    s.finished_error += finished[3];
    s.spec_drafts += m.spec_delta.spec_drafts;
    s.spec_draft_tokens += m.spec_delta.spec_draft_tokens;
    s.spec_accepted_tokens += m.spec_delta.spec_accepted_tokens;
    for (size_t p = 0; p < s.spec_accepted_per_pos.size(); ++p) s.spec_accepted_per_pos[p] += m.spec_delta.spec_accepted_per_pos[p];
    if (m.controller) s.spec_mean_k = m.controller->mean_k();
    if (m.proposer) s.spec_time_by_part = m.proposer->time_by_part();
  }
  return !plan.empty() || !incoming.empty() || !aborts.empty();
}

void Engine::run_until_idle() {
  while (true) {
    {
      std::lock_guard lock(impl_->mu);
      if (impl_->incoming.empty() && impl_->aborts.empty() && impl_->scheduler.idle()) return;
    }
    step();
  }
}

void Engine::start() {
  std::lock_guard lock(impl_->mu);
  if (impl_->thread.joinable()) return;
  impl_->stopping = false;
  impl_->thread = std::thread([this] {
    while (true) {
      const bool worked = step();
      std::unique_lock lock(impl_->mu);
      if (impl_->stopping) return;
      if (!worked && impl_->scheduler.idle())
        impl_->wake.wait(lock, [this] { return impl_->stopping || !impl_->incoming.empty() || !impl_->aborts.empty(); });
    }
  });
}

void Engine::stop() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Whatever is left finishes with "abort", so no caller waits forever.
  std::lock_guard step_lock(impl_->step_mu);
  Impl& m = *impl_;
  std::vector<std::unique_ptr<Sequence>> incoming;
  {
    std::lock_guard lock(m.mu);
    incoming.swap(m.incoming);
    m.aborts.clear();
  }
  for (auto& seq : incoming) m.seqs[seq->id] = std::move(seq);
  for (auto& [id, seq] : m.seqs) {
    m.scheduler.remove(seq.get());
    if (m.proposer) {
      m.proposer->finish(seq->id, seq->tokens, seq->prompt_len);
      m.controller->forget(seq->id);
    }
    RequestUpdate u;
    u.finished = true;
    u.finish_reason = "abort";
    send(*seq, u);
  }
  m.seqs.clear();
  std::lock_guard lock(m.mu);
  m.stats.running = m.stats.waiting = 0;
  m.stats.kv_blocks_used = m.blocks.num_used();
}

}  // namespace zen
