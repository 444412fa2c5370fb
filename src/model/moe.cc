#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"

namespace zen {
namespace {

template <typename T>
T* grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

// Plain Linear over `rows` x `cols` of `t` starting at row `first_row`; the view it points to
// is kept in `views` (a deque: element addresses survive later push_backs).
Linear view_linear(std::deque<TensorView>& views, const TensorView& t, const std::string& label, int64_t first_row,
                   int64_t rows, int64_t cols) {
  const size_t row_bytes = dtype_row_bytes(t.dtype, cols);
  TensorView v;
  v.name = label;
  v.dtype = t.dtype;
  v.shape = {rows, cols};
  v.data = t.data + static_cast<size_t>(first_row) * row_bytes;
  v.nbytes = static_cast<size_t>(rows) * row_bytes;
  views.push_back(std::move(v));
  Linear L;
  L.format = LinearFormat::Plain;
  L.name = label;
  L.rows = rows;
  L.cols = cols;
  L.weight = &views.back();
  return L;
}

// Takes a stacked tensor `name` of `shape` in a plain/GGUF-block dtype; nullptr (recorded in
// the ledger) when absent or wrong.
const TensorView* take_stacked(Checkpoint& c, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorView* t = c.take(name, shape);
  if (t == nullptr || t->shape != shape) return nullptr;
  if (!kernels::is_supported_weight_dtype(t->dtype)) {
    c.note_mismatch(name + ": dtype " + dtype_name(t->dtype) + " is not supported for stacked experts");
    return nullptr;
  }
  return t;
}

// Experts stacked as one tensor per projection: [E, rows_per_expert, cols]; of each expert in
// `local`, the rows [rows) of the take_rows at row_offset and the columns [cols). Whole experts
// are viewed in place (an expert-parallel rank maps no other expert's pages); a tensor-parallel
// rank's rows or columns are copied (Linear::slice).
void bind_stacked(Checkpoint& c, std::deque<TensorView>& views, const std::string& name, int64_t E,
                  int64_t rows_per_expert, int64_t cols, int64_t take_rows, int64_t row_offset,
                  std::vector<MoeExpert>& experts, Linear MoeExpert::*field, dist::Range local, dist::Range rows,
                  dist::Range col_range) {
  // The fused gate_up tensor is bound twice (gate rows, then up rows); it is taken once.
  const std::vector<int64_t> shape = {E, rows_per_expert, cols};
  const TensorView* t = row_offset == 0 ? take_stacked(c, name, shape) : c.peek(name);
  if (t == nullptr || t->shape != shape || !kernels::is_supported_weight_dtype(t->dtype)) return;
  const bool whole = rows == dist::Range{0, take_rows} && col_range == dist::Range{0, cols};
  for (int64_t e = local.begin; e < local.end; ++e) {
    Linear expert = view_linear(views, *t, name + "[" + std::to_string(e) + "]", e * rows_per_expert + row_offset,
                                take_rows, cols);
    experts[static_cast<size_t>(e)].*field = whole ? expert : Linear::slice(c, expert, {rows}, {col_range});
  }
}

bool all_valid(const MoeExpert& e) { return e.gate.valid() && e.up.valid() && e.down.valid(); }

// Top-k of p[E] by value, descending; ties go to the lower index. One pass keeping the k best
// in order (insertion), O(E) for the usual case where few values enter the list.
void top_k(const float* p, int64_t E, int64_t k, int32_t* chosen) {
  int64_t filled = 0;
  for (int64_t e = 0; e < E; ++e) {
    const float v = p[e];
    if (filled == k && !(v > p[chosen[k - 1]])) continue;
    int64_t i = filled < k ? filled++ : k - 1;  // when full, the last entry drops out
    for (; i > 0 && p[chosen[i - 1]] < v; --i) chosen[i] = chosen[i - 1];
    chosen[i] = static_cast<int32_t>(e);
  }
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// out[n, H] = down(silu(gate x) * up x) for one expert over n rows.
void expert_forward(const MoeExpert& ex, const float* x, int64_t n, float* gate, float* up, float* out,
                    ThreadPool& pool) {
  ex.gate.matmul(x, n, gate, pool);
  ex.up.matmul(x, n, up, pool);
  kernels::silu_mul(gate, up, n * ex.gate.rows, gate);
  ex.down.matmul(gate, n, out, pool);
}

}  // namespace

MoeShape MoeShape::from_config(const ModelConfig& cfg) {
  MoeShape s;
  s.hidden = cfg.hidden_size;
  s.num_experts = cfg.num_experts;
  s.top_k = cfg.num_experts_per_tok;
  s.expert_intermediate = cfg.moe_intermediate_size;
  s.shared_intermediate = cfg.shared_expert_intermediate_size;
  s.norm_topk_prob = cfg.norm_topk_prob;
  return s;
}

bool MoeWeights::valid() const {
  if (!router.valid() || experts.size() != static_cast<size_t>(shape.num_experts)) return false;
  for (int64_t e = local().begin; e < local().end; ++e)
    if (!all_valid(experts[static_cast<size_t>(e)])) return false;
  return shape.shared_intermediate == 0 || (all_valid(shared) && shared_gate.valid());
}

MoeColumnBlocks moe_column_blocks(const Checkpoint& c, const std::string& prefix, const QuantConfig& quant) {
  const std::string p = prefix + ".";
  MoeColumnBlocks b;
  if (c.format() == CheckpointFormat::Gguf) {
    b.experts = Linear::column_block(c, p + "ffn_down_exps.weight", quant);
    b.shared = Linear::column_block(c, p + "ffn_down_shexp.weight", quant);
  } else {
    b.experts = Linear::column_block(
        c, c.has(p + "experts.down_proj") ? p + "experts.down_proj" : p + "experts.0.down_proj.weight", quant);
    b.shared = Linear::column_block(c, p + "shared_expert.down_proj.weight", quant);
  }
  return b;
}

MoeShard moe_shard(const ModelConfig& cfg, int t, int r, bool expert_parallel, const MoeColumnBlocks& blocks) {
  MoeShard shard;
  if (t == 1) return shard;
  shard.whole = false;
  const int64_t I = cfg.moe_intermediate_size, Is = cfg.shared_expert_intermediate_size;
  if (expert_parallel) {
    shard.experts = dist::split(cfg.num_experts, t, r);
    shard.expert_rows = {0, I};
  } else {
    shard.experts = {0, cfg.num_experts};
    shard.expert_rows = dist::split(I, t, r, blocks.experts);
    if (shard.expert_rows.size() == 0)
      fail("--tensor-parallel-size ", t, ": the experts' intermediate size ", I, " in blocks of ", blocks.experts,
           " leaves rank ", r, " no rows (--enable-expert-parallel splits whole experts instead)");
  }
  if (Is > 0) {
    shard.shared_rows = dist::split(Is, t, r, blocks.shared);
    if (shard.shared_rows.size() == 0)
      fail("--tensor-parallel-size ", t, ": the shared expert's intermediate size ", Is, " in blocks of ",
           blocks.shared, " leaves rank ", r, " no rows");
  }
  return shard;
}

MoeWeights bind_moe(Checkpoint& c, const std::string& prefix, const ModelConfig& cfg, const QuantConfig& quant,
                    const MoeShard& shard) {
  return bind_moe(c, prefix, MoeShape::from_config(cfg), quant, shard);
}

MoeWeights bind_moe(Checkpoint& c, const std::string& prefix, const MoeShape& shape, const QuantConfig& quant,
                    const MoeShard& shard) {
  ZEN_CHECK(shape.num_experts > 0 && shape.top_k > 0 && shape.top_k <= shape.num_experts &&
                shape.expert_intermediate > 0 && shape.hidden > 0,
            "bind_moe: invalid MoE shape for ", prefix);
  const int64_t H = shape.hidden, E = shape.num_experts, I = shape.expert_intermediate;
  const int64_t Is = shape.shared_intermediate;
  const dist::Range local = shard.whole ? dist::Range{0, E} : shard.experts;
  const dist::Range rows = shard.whole ? dist::Range{0, I} : shard.expert_rows;
  const dist::Range shared_rows = shard.whole ? dist::Range{0, Is} : shard.shared_rows;
  ZEN_CHECK(local.begin >= 0 && local.begin <= local.end && local.end <= E && rows.begin >= 0 && rows.end <= I &&
                rows.size() > 0 && shared_rows.begin >= 0 && shared_rows.end <= Is &&
                (Is == 0 || shared_rows.size() > 0),
            "bind_moe: invalid shard of ", prefix);
  MoeWeights w;
  w.shape = shape;
  w.local_experts = local;
  w.experts.resize(static_cast<size_t>(E));
  auto views = std::make_shared<std::deque<TensorView>>();
  auto bind = [&](const std::string& name, int64_t rows, int64_t cols) {
    return Linear::bind(c, name, {rows, cols}, quant);
  };
  const dist::Range all_h{0, H};
  // The shared expert, split by intermediate rows on a shard: gate/up rows, down columns.
  auto bind_shared = [&](const std::string& gate, const std::string& up, const std::string& down) {
    if (shared_rows.size() == Is) return MoeExpert{bind(gate, Is, H), bind(up, Is, H), bind(down, H, Is)};
    return MoeExpert{Linear::bind_slice(c, gate, {Is, H}, quant, shared_rows, all_h),
                     Linear::bind_slice(c, up, {Is, H}, quant, shared_rows, all_h),
                     Linear::bind_slice(c, down, {H, Is}, quant, all_h, shared_rows)};
  };

  if (c.format() == CheckpointFormat::Gguf) {
    const std::string p = prefix + ".";
    w.router = bind(p + "ffn_gate_inp.weight", E, H);
    bind_stacked(c, *views, p + "ffn_gate_exps.weight", E, I, H, I, 0, w.experts, &MoeExpert::gate, local, rows, all_h);
    bind_stacked(c, *views, p + "ffn_up_exps.weight", E, I, H, I, 0, w.experts, &MoeExpert::up, local, rows, all_h);
    bind_stacked(c, *views, p + "ffn_down_exps.weight", E, H, I, H, 0, w.experts, &MoeExpert::down, local, all_h,
                 rows);
    if (Is > 0) {
      w.shared = bind_shared(p + "ffn_gate_shexp.weight", p + "ffn_up_shexp.weight", p + "ffn_down_shexp.weight");
      // llama.cpp stores the shared gate as a vector [H].
      const std::string gate_name = p + "ffn_gate_inp_shexp.weight";
      if (const TensorView* t = c.take(gate_name, {H}); t != nullptr && t->shape == std::vector<int64_t>{H})
        w.shared_gate = view_linear(*views, *t, gate_name, 0, 1, H);
    }
  } else {
    const std::string p = prefix + ".";
    w.router = bind(p + "gate.weight", E, H);
    if (c.has(p + "experts.gate_up_proj") && !c.has(p + "experts.0.gate_proj.weight")) {
      bind_stacked(c, *views, p + "experts.gate_up_proj", E, 2 * I, H, I, 0, w.experts, &MoeExpert::gate, local, rows,
                   all_h);
      bind_stacked(c, *views, p + "experts.gate_up_proj", E, 2 * I, H, I, I, w.experts, &MoeExpert::up, local, rows,
                   all_h);
      bind_stacked(c, *views, p + "experts.down_proj", E, H, I, H, 0, w.experts, &MoeExpert::down, local, all_h, rows);
    } else {
      if (local.size() < E) {
        // The other ranks' experts (weights and any scale tensors) are theirs to read.
        std::string others;
        for (int64_t e = 0; e < E; ++e)
          if (e < local.begin || e >= local.end) others += (others.empty() ? "" : "|") + std::to_string(e);
        std::string escaped;
        for (char ch : p) escaped += ch == '.' ? std::string("\\.") : std::string(1, ch);
        c.ignore(escaped + "experts\\.(" + others + ")\\..*", "an expert held by another rank (expert parallel)");
      }
      for (int64_t e = local.begin; e < local.end; ++e) {
        const std::string q = p + "experts." + std::to_string(e) + ".";
        w.experts[static_cast<size_t>(e)] = {Linear::bind_slice(c, q + "gate_proj.weight", {I, H}, quant, rows, all_h),
                                             Linear::bind_slice(c, q + "up_proj.weight", {I, H}, quant, rows, all_h),
                                             Linear::bind_slice(c, q + "down_proj.weight", {H, I}, quant, all_h, rows)};
      }
    }
    if (Is > 0) {
      w.shared = bind_shared(p + "shared_expert.gate_proj.weight", p + "shared_expert.up_proj.weight",
                             p + "shared_expert.down_proj.weight");
      w.shared_gate = bind(p + "shared_expert_gate.weight", 1, H);
    }
  }
  w.stacked_views = std::move(views);
  return w;
}

void moe_route(const MoeWeights& w, const float* xn, int64_t n, ThreadPool& pool, MoeScratch& s) {
  const int64_t E = w.shape.num_experts, k = w.shape.top_k;
  float* probs = grow(s.router_probs, n * E);
  int32_t* chosen = grow(s.chosen, n * k);
  float* weights = grow(s.weights, n * k);
  w.router.matmul(xn, n, probs, pool);  // logits [n, E]
  for (int64_t t = 0; t < n; ++t) {
    float* p = probs + t * E;
    kernels::softmax_inplace(p, E);
    top_k(p, E, k, chosen + t * k);
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += p[chosen[t * k + j]];
    for (int64_t j = 0; j < k; ++j) {
      const float v = p[chosen[t * k + j]];
      weights[t * k + j] = w.shape.norm_topk_prob ? v / sum : v;
    }
  }
}

void moe_forward(const MoeWeights& w, const float* xn, int64_t n, float* out, ThreadPool& pool, MoeScratch& s) {
  ZEN_CHECK(w.valid(), "moe_forward: unbound MoE weights");
  if (n <= 0) return;
  const int64_t H = w.shape.hidden, E = w.shape.num_experts, k = w.shape.top_k, I = w.local_intermediate();
  moe_route(w, xn, n, pool, s);
  const int32_t* chosen = s.chosen.data();

  // Group the (token, slot) pairs by expert, tokens in order within an expert; a shard groups
  // only the pairs of its own experts (row_of -1 for the others).
  const dist::Range local = w.local();
  auto is_local = [&](int32_t e) { return e >= local.begin && e < local.end; };
  int64_t* begin = grow(s.expert_begin, E + 1);
  std::fill(begin, begin + E + 1, 0);
  for (int64_t i = 0; i < n * k; ++i)
    if (is_local(chosen[i])) ++begin[chosen[i] + 1];
  for (int64_t e = 0; e < E; ++e) begin[e + 1] += begin[e];
  int32_t* row_of = grow(s.row_of, n * k);
  float* gx = grow(s.grouped_x, n * k * H);
  {
    std::vector<int64_t>& cursor = s.expert_cursor;
    cursor.assign(begin, begin + E);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j) {
        if (!is_local(chosen[t * k + j])) {
          row_of[t * k + j] = -1;
          continue;
        }
        const int64_t row = cursor[static_cast<size_t>(chosen[t * k + j])]++;
        row_of[t * k + j] = static_cast<int32_t>(row);
        std::memcpy(gx + row * H, xn + t * H, static_cast<size_t>(H) * sizeof(float));
      }
  }

  // One matmul per projection per chosen expert, over its rows only.
  float* gg = grow(s.grouped_gate, n * k * I);
  float* gu = grow(s.grouped_up, n * k * I);
  float* go = grow(s.grouped_out, n * k * H);
  std::vector<int32_t>& active = s.active_experts;
  active.clear();
  int64_t most_rows = 0;
  for (int64_t e = 0; e < E; ++e)
    if (begin[e + 1] > begin[e]) {
      active.push_back(static_cast<int32_t>(e));
      most_rows = std::max(most_rows, begin[e + 1] - begin[e]);
    }
  auto run_expert = [&](int32_t e, ThreadPool& p) {
    const int64_t r = begin[e], rows = begin[e + 1] - r;
    expert_forward(w.experts[static_cast<size_t>(e)], gx + r * H, rows, gg + r * I, gu + r * I, go + r * H, p);
  };
  // With enough active experts, each thread runs whole experts (one pool wake-up for all of
  // them instead of three per expert), the experts split into contiguous runs of about equal
  // row counts; otherwise each expert's rows are split over the pool. Either way every output
  // row comes from the same kernels, so results do not depend on the choice.
  const auto threads = static_cast<int64_t>(pool.size());
  const int64_t total_rows = begin[E];
  if (threads > 1 && static_cast<int64_t>(active.size()) >= 2 * threads && most_rows * threads <= total_rows) {
    while (static_cast<int64_t>(s.inline_pools.size()) < threads) s.inline_pools.push_back(std::make_unique<ThreadPool>(1));
    pool.parallel_for(
        threads,
        [&](int64_t part_begin, int64_t part_end, int slot) {
          ThreadPool& own = *s.inline_pools[static_cast<size_t>(slot)];
          for (int32_t e : active) {
            // The part holding the expert's middle row runs it.
            const int64_t part = (2 * begin[e] + (begin[e + 1] - begin[e])) * threads / (2 * total_rows);
            if (part >= part_begin && part < part_end) run_expert(e, own);
          }
        },
        1);
  } else {
    for (int32_t e : active) run_expert(e, pool);
  }

  // Each token sums its own contributions in its own top-k order (batch-invariant).
  const float* weights = s.weights.data();
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * H;
    std::fill(o, o + H, 0.0f);
    for (int64_t j = 0; j < k; ++j)
      if (row_of[t * k + j] >= 0) kernels::axpy_f32(weights[t * k + j], go + row_of[t * k + j] * H, o, H);
  }

  if (w.shape.shared_intermediate > 0) {
    const int64_t Is = w.shared.gate.rows;  // this rank's rows
    float* sg = grow(s.shared_gate, n * Is);
    float* su = grow(s.shared_up, n * Is);
    float* so = grow(s.shared_out, n * H);
    float* logit = grow(s.shared_logit, n);
    expert_forward(w.shared, xn, n, sg, su, so, pool);
    w.shared_gate.matmul(xn, n, logit, pool);
    for (int64_t t = 0; t < n; ++t) kernels::axpy_f32(sigmoid(logit[t]), so + t * H, out + t * H, H);
  }
}

}  // namespace zen
