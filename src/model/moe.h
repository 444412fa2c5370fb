// Sparse mixture-of-experts feed-forward block of the family (Qwen3-MoE, Qwen3-Next,
// Qwen3.5-MoE), usable by any architecture that binds it.
//
// Contract of moe_forward, for each token t (x = xn[t], already normalised, [H]):
//   p      = softmax(router · x)                   f32, [E]
//   e[j]   = the k largest p (descending), j < k   ties: lower expert index first
//   w[j]   = p[e[j]]  (divided by sum_j p[e[j]] when norm_topk_prob)
//   out[t] = sum_{j=0..k-1} w[j] * down_e(silu(gate_e · x) * (up_e · x))   summed in j order
//          + sigmoid(shared_gate · x) * down_s(silu(gate_s · x) * (up_s · x))   (shared expert)
// out is overwritten, not accumulated. Batch-invariant: out[t] depends on xn[t] only (every
// matmul is row-invariant and each token sums its own contributions in its own top-k order),
// so a sequence decodes identically alone or inside any batch.
//
// Work: the router runs over all n tokens; then tokens are grouped by expert (stable, by token
// index), each chosen expert runs one matmul per projection over its gathered rows, and the
// results are summed back per token. Decode (n = 1) therefore reads only the k chosen experts'
// weights. Weights stay in their stored format (see linear.h: BF16/F16/F32, GGUF blocks, FP8,
// NVFP4).
//
// Tensor names bound by bind_moe, prefix = the MLP module:
//   HF (prefix "model.layers.3.mlp"):
//     prefix.gate.weight [E, H]                                           router
//     prefix.experts.{e}.{gate,up}_proj.weight [I, H], .down_proj.weight [H, I]
//       or the fused layout transformers 5 keeps in memory (plain dtypes only):
//     prefix.experts.gate_up_proj [E, 2I, H] (gate rows first), prefix.experts.down_proj [E, H, I]
//     prefix.shared_expert.{gate,up}_proj.weight [Is, H], .down_proj.weight [H, Is]  (Is > 0)
//     prefix.shared_expert_gate.weight [1, H]                                        (Is > 0)
//   GGUF (prefix "blk.3", llama.cpp's names; experts stacked):
//     ffn_gate_inp.weight [E, H], ffn_{gate,up}_exps.weight [E, I, H], ffn_down_exps.weight [E, H, I],
//     ffn_{gate,up}_shexp.weight [Is, H], ffn_down_shexp.weight [H, Is], ffn_gate_inp_shexp.weight [H]
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "io/tensor.h"
#include "dist/tensor_parallel.h"
#include "model/config.h"
#include "model/linear.h"

namespace zen {

struct MoeShape {
  int64_t hidden = 0;                // H
  int64_t num_experts = 0;           // E
  int64_t top_k = 0;                 // k
  int64_t expert_intermediate = 0;   // I
  int64_t shared_intermediate = 0;   // Is; 0: no shared expert
  bool norm_topk_prob = false;

  static MoeShape from_config(const ModelConfig& cfg);
};

struct MoeExpert {
  Linear gate;  // [I', H]  (I' = I, or a tensor-parallel rank's rows)
  Linear up;    // [I', H]
  Linear down;  // [H, I']
};

// The part of a MoE block one rank of a tensor-parallel job holds (everything by default):
// routed experts [experts.begin, experts.end), of each the intermediate rows [expert_rows)
// (gate/up rows, down columns), and rows [shared_rows) of the shared expert's intermediate.
// Expert parallel: some experts, all their rows; tensor parallel (vLLM's default): every
// expert, some rows. The router and the shared expert's gate are replicated. The rank's
// moe_forward output is its part of the sum; an all-reduce over the ranks completes it.
struct MoeShard {
  bool whole = true;
  dist::Range experts, expert_rows, shared_rows;
};

struct MoeWeights {
  MoeShape shape;
  Linear router;                    // [E, H]
  std::vector<MoeExpert> experts;   // [E]; only local_experts are bound
  // This rank's experts (all unless expert-parallel; the end is clamped to E).
  dist::Range local_experts{0, std::numeric_limits<int64_t>::max()};
  dist::Range local() const { return {local_experts.begin, std::min(local_experts.end, shape.num_experts)}; }
  // I': the intermediate rows of each routed expert held here (I unless tensor-parallel).
  int64_t local_intermediate() const {
    return local().size() > 0 ? experts.at(static_cast<size_t>(local().begin)).gate.rows : shape.expert_intermediate;
  }
  MoeExpert shared;                 // Is > 0 only ([Is', H], [Is', H], [H, Is']; Is' = this rank's rows)
  Linear shared_gate;               // [1, H], Is > 0 only
  // Per-expert views into stacked tensors (GGUF, fused HF); Linears above point into them.
  std::shared_ptr<const std::deque<TensorView>> stacked_views;

  bool valid() const;  // every needed Linear bound
};

// Activation scratch, grown on demand (no allocation once it has seen the largest batch).
struct MoeScratch {
  std::vector<float> router_probs;    // [n, E]
  std::vector<int32_t> chosen;        // [n, k] expert ids
  std::vector<float> weights;         // [n, k] routing weights
  std::vector<int32_t> row_of;        // [n, k] row of (t, j) in the grouped buffers
  std::vector<int64_t> expert_begin;  // [E + 1] first grouped row of each expert
  std::vector<int64_t> expert_cursor; // [E] next free grouped row while grouping
  std::vector<int32_t> active_experts; // experts with at least one row, ascending
  std::vector<std::unique_ptr<ThreadPool>> inline_pools;  // one single-thread pool per slot
  std::vector<float> grouped_x;       // [n*k, H]
  std::vector<float> grouped_gate;    // [n*k, I]
  std::vector<float> grouped_up;      // [n*k, I]
  std::vector<float> grouped_out;     // [n*k, H]
  std::vector<float> shared_gate, shared_up, shared_out;  // [n, Is], [n, Is], [n, H]
  std::vector<float> shared_logit;    // [n]
};

// The column blocks a tensor-parallel cut of the block under `prefix` must keep: of the
// routed experts' down projections and of the shared expert's (Linear::column_block).
struct MoeColumnBlocks {
  int64_t experts = 1, shared = 1;
};
MoeColumnBlocks moe_column_blocks(const Checkpoint& ckpt, const std::string& prefix, const QuantConfig& quant);
// Rank r of t's shard: whole experts (expert_parallel) or every expert's rows, cut on
// `blocks` (which must hold for every MoE layer); throws naming the size when a rank gets none.
MoeShard moe_shard(const ModelConfig& cfg, int t, int r, bool expert_parallel, const MoeColumnBlocks& blocks);

// Binds the block under `prefix` (see the header comment) from the checkpoint ledger; a
// missing or mismatched tensor is recorded there, naming it, and leaves the result invalid.
// A shard binds only its experts' tensors (the others are marked "held by another rank").
MoeWeights bind_moe(Checkpoint& ckpt, const std::string& prefix, const MoeShape& shape,
                    const QuantConfig& quant, const MoeShard& shard = {});
MoeWeights bind_moe(Checkpoint& ckpt, const std::string& prefix, const ModelConfig& cfg,
                    const QuantConfig& quant, const MoeShard& shard = {});

// out[n, H] = MoE(xn[n, H]); see the contract above. out must not alias xn. A shard's out sums
// only its own experts' terms (each token's in its top-k order) and its shared-expert rows.
void moe_forward(const MoeWeights& w, const float* xn, int64_t n, float* out, ThreadPool& pool,
                 MoeScratch& scratch);

// The routing step alone (exposed for tests): probs[n, E], chosen[n, k], weights[n, k].
void moe_route(const MoeWeights& w, const float* xn, int64_t n, ThreadPool& pool, MoeScratch& scratch);

}  // namespace zen
