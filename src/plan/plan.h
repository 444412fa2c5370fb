// zen plan: how a model too large for one machine would be laid out across N machines (one
// rank per node) and what that costs, from the config alone (issue 22: multi-process inference
// over MPI). Pure functions over ModelConfig + Options returning structs; no I/O here (the
// command, src/cli/plan.cc, prints them). The future MPI engine checks the per-step collective
// list (step_collectives) against what a run measures: every collective is one CollectiveCall
// with its kind, its communicator size, its count per decode step and its bytes per call.
//
// Parallelism (vLLM / Megatron conventions):
//  - TP=t: column-parallel q/k/v and gate/up, row-parallel o_proj and down_proj: ONE all-reduce
//    of [tokens, H] after the attention (or Gated DeltaNet) mixer and ONE after the MLP or MoE
//    block, per layer. Query heads split (num_heads % t == 0); KV heads split when t <= KV heads
//    (KV % t == 0), else each rank holds one KV head and each KV head is replicated t / KV times
//    (t % KV == 0). Gated DeltaNet layers split by key-head groups (linear_num_key_heads % t ==
//    0; value heads, conv channels, A_log, dt_bias follow), the same two all-reduces. MLP and
//    expert intermediates split in ceil(I / t) rows (padded when not divisible). Under TP a MoE
//    layer gives every rank 1/t of every expert; the router is replicated.
//    Embedding split by vocabulary (ceil(V / t) rows): each rank looks up the rows it holds,
//    zeros elsewhere, and ONE all-reduce of [tokens, H] sums them (vLLM's
//    VocabParallelEmbedding; an all-gather would move the same bytes). lm_head split by
//    vocabulary: ONE all-gather per step; of an 8-byte (max f32, index i32) per token when every
//    row is greedy over raw logits (the MPI engine's ForwardBatch::argmax_only), else of each
//    rank's f32 logits slice [tokens, ceil(V / t)] (sampling, logprobs, grammar masks and
//    penalties read every logit; --logits plans that case).
//  - EP=e (MoE models only): the routed experts split in E / e whole experts per rank; router,
//    attention, dense MLP layers, shared experts, embedding and lm_head are replicated on every
//    rank (no TP inside). Two ways to run a MoE layer:
//      (a) all-to-all: data-parallel attention (a sequence lives on one rank); each token's k
//          hidden rows go to the ranks holding its experts (expected remote fraction (e-1)/e),
//          then come back (combine): 2 all-to-alls per MoE layer.
//      (b) all-reduce: every rank runs the (replicated) attention for every token, computes its
//          local experts for all tokens and ONE all-reduce of [tokens, H] sums them; KV is then
//          replicated too (no e-fold KV capacity).
//    Both have 2(e-1) latency steps per MoE layer; at batch 1 (b) moves 2(e-1)/e rows per rank
//    against (a)'s 2k(e-1)/e, so (b) wins whenever k > 1. At batch B (a) sends 2(B/e)k(e-1)/e
//    rows per rank against (b)'s 2B(e-1)/e: (a) wins when k < e, ties at k = e, and keeps
//    e-fold KV capacity. The plan uses the option cheaper at batch 1 and reports both.
//  - PP=p: layers in p contiguous stages balanced by LAYER COUNT (the first L % p stages get
//    one more layer); embedding on the first stage, final norm and lm_head on the last (a tied
//    lm_head is a copy of the embedding there when p > 1). One point-to-point send of
//    [tokens, H] per stage boundary per forward (each of the stage's TP ranks to its peer, in
//    parallel), and the new tokens' (max, index) (greedy; else their f32 logits [tokens, V])
//    go from the last stage back to the first, where the engine samples.
//    At batch-1 decode the stages run one after another (latencies add); with at least p
//    sequences (micro-batches) in flight they overlap and the bound is the slowest stage; a
//    single forward of m micro-batches idles (p-1)/(m+p-1) of the time (the bubble).
//  - Layouts: t x p and (MoE) e x p for every factorization of N; one rank per node.
//
// Cost model (decode at batch 1, per token):
//  - Weight bytes per rank = its parameters x bytes per parameter of the dtype (bf16 2, f16 2,
//    fp8 1, nvfp4 0.5625 (4.5 bits with scales), q4_k 0.5625, q8_0 1.0625, f32 4) for every
//    matrix (embedding and conv1d included); 1-D tensors (norm gains, biases, A_log, dt_bias)
//    are kept f32 (4 bytes).
//  - KV bytes per token per rank = its stage's full-attention layers x its KV heads x head_dim
//    x 2 (K and V) x KV dtype bytes. Recurrent state per sequence per rank (hybrids) = the
//    model's f32 state (recurrent_state_bytes) x (its stage's linear layers / all linear
//    layers) / t. Usable memory = memory per node x (1 - reserve); KV capacity per rank =
//    (usable - weights - states of `sequences` sequences) / KV bytes per token. A layout fits
//    when every rank holds its weights and states and at least min_kv_tokens tokens of KV.
//  - Memory time = sum over stages of (max over the stage's ranks of the weight bytes read per
//    token) / memory bandwidth. Read per token: every local matrix, except the embedding (one
//    row) and MoE experts (the k routed ones; under EP the balanced expectation k/e per rank,
//    worst case min(k, E/e) reported beside it). KV and recurrent-state reads are ignored.
//  - Network time = sum over collectives of calls x time per call, alpha = latency, beta =
//    network bandwidth in bytes/s (Gbit/s / 8):
//      ring all-reduce of B bytes over n ranks: 2(n-1) steps of alpha + (B/n)/beta;
//      all-gather of b bytes per rank: (n-1) steps of alpha + b/beta;
//      all-to-all sending S bytes per rank: (n-1) steps of alpha + (S/(n-1))/beta;
//      point-to-point send of B bytes: alpha + B/beta.
//    "Wire bytes" are the bytes one rank sends per call: 2(n-1)/n B, (n-1) b, S and B.
//  - Tokens/s bound = 1 / (memory time + network time): no overlap of compute and
//    communication at batch 1. Activations travel as bf16 unless wire_bytes says otherwise.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"

namespace zen::plan {

struct Options {
  int64_t nodes = 0;                   // N ranks, one per node
  double memory_per_node = 0;          // bytes
  double network_gbps = 0;             // Gbit/s per node
  double latency_us = 20;              // alpha: TCP over Ethernet (RDMA: a few us)
  double memory_bandwidth_gbs = 200;   // GB/s (1e9 bytes/s) of weight reads per rank
  std::string dtype = "bf16";          // weights (dtype_bytes)
  KvDType kv_dtype = KvDType::BF16;
  double wire_bytes = 2;               // bytes per activation value on the wire (bf16)
  double reserve = 0.10;               // fraction of each node's memory kept free
  int64_t min_kv_tokens = 4096;        // a layout fits when every rank has KV room for this
  int64_t sequences = 1;               // recurrent states reserved per rank (hybrids)
  int64_t large_batch = 64;            // the batch of the EP all-to-all vs all-reduce comparison
  // Greedy rows (the decode bound's case): the vocabulary split exchanges an 8-byte (max,
  // index) per token; false: rows that sample or return logprobs exchange f32 logits.
  bool greedy = true;
  void validate() const;               // throws zen::Error naming the bad value
};

// Bytes per parameter of a weight dtype name (bf16, f16, fp8, nvfp4, q4_k, q8_0, f32).
double dtype_bytes(const std::string& dtype);

struct Layout {
  int64_t tp = 1, ep = 1, pp = 1;
  int64_t ranks() const { return tp * ep * pp; }
  int64_t stage_ranks() const { return tp * ep; }
  std::string name() const;  // "tp=4,pp=2", "ep=8", "pp=8", "tp=1" (one rank)
  bool operator==(const Layout&) const = default;
};

// "tp=8", "tp=4,pp=2", "ep=8", "pp=8" (any order; absent factors are 1). Throws zen::Error.
Layout parse_layout(const std::string& text);

// Every t x p factorization of nodes, and e x p (e > 1) for MoE models; pp ascending.
std::vector<Layout> candidate_layouts(const ModelConfig& cfg, int64_t nodes);

// "" when cfg can be laid out as `layout`, else why not (heads not divisible, ...).
std::string layout_problem(const ModelConfig& cfg, const Layout& layout);

// ---- Parameters by category (whole model, one rank). Sums equal count_parameters(cfg). ----
struct Category {
  std::string name;
  int64_t total = 0;    // parameters stored
  int64_t active = 0;   // parameters used per token (routed experts: k of E)
  int64_t vectors = 0;  // of total: 1-D tensors kept f32 (norms, biases, A_log, dt_bias)
};
struct ParameterBreakdown {
  std::vector<Category> categories;  // embedding, lm_head, norms, attention, linear_attention,
                                     // dense_mlp, router, routed_experts, shared_experts
  int64_t total() const;
  int64_t active() const;
  int64_t vectors() const;
};
ParameterBreakdown parameter_breakdown(const ModelConfig& cfg);

struct ModelSummary {
  int64_t parameters = 0, active_parameters = 0;
  double weight_bytes = 0;           // at the dtype (1-D tensors f32)
  double active_weight_bytes = 0;    // read per token on one rank
  int64_t kv_bytes_per_token = 0;    // every KV head, at the KV dtype
  int64_t state_bytes_per_sequence = 0;  // f32 recurrent state (hybrids)
  int64_t kv_layers = 0, linear_layers = 0, moe_layers = 0;
};
ModelSummary summarize(const ModelConfig& cfg, const Options& o);

// ---- Collectives ----
enum class CollectiveKind { AllReduce, AllGather, AllToAll, Send };
const char* collective_name(CollectiveKind k);  // "all-reduce", "all-gather", "all-to-all", "send"

// How EP runs a MoE layer (see the header comment).
enum class MoeComm { AllToAll, AllReduce };
const char* moe_comm_name(MoeComm m);

// One collective of a forward step, repeated `calls` times per step.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::AllReduce;
  std::string purpose;     // "attention output (row-parallel o_proj)", ...
  int64_t stage = 0;       // the pipeline stage issuing it
  int64_t group = 0;       // ranks in the communicator (2 for a send)
  int64_t calls = 0;       // per forward step (per token at batch-1 decode)
  int64_t calls_per_layer = 0;  // 1 for per-layer collectives, 0 for the others
  double payload_bytes = 0;  // all-reduce: the [tokens, H] tensor; all-gather: one rank's part;
                             // all-to-all: what the busiest rank sends (expected); send: the message
  double wire_bytes = 0;     // bytes one rank sends per call (algorithm model above)
  double seconds = 0;        // per call: latency + bandwidth terms
};

// The collectives of one forward step over `tokens` tokens (1 = batch-1 decode). For EP,
// `moe` picks the MoE exchange; ignored otherwise.
std::vector<CollectiveCall> step_collectives(const ModelConfig& cfg, const Layout& layout, const Options& o,
                                             int64_t tokens, MoeComm moe = MoeComm::AllReduce);

struct KindTotals {
  CollectiveKind kind;
  int64_t calls = 0;
  double wire_bytes = 0;  // per step, one rank
  double seconds = 0;     // per step
};
std::vector<KindTotals> totals_by_kind(const std::vector<CollectiveCall>& calls);  // kinds present
int64_t total_calls(const std::vector<CollectiveCall>& calls);
double total_wire_bytes(const std::vector<CollectiveCall>& calls);
double total_seconds(const std::vector<CollectiveCall>& calls);

// ---- One layout ----
struct StagePlan {
  int64_t first_layer = 0, layers = 0;
  int64_t kv_layers = 0, linear_layers = 0, moe_layers = 0, dense_layers = 0;
  bool embedding = false, lm_head = false;
  int64_t parameters = 0;             // per rank (the largest rank of the stage)
  double weight_bytes = 0;            // per rank
  double read_bytes = 0;              // per rank per token at batch 1 (EP: expected)
  double read_bytes_worst = 0;        // EP: all k experts of the token on this rank
  int64_t kv_bytes_per_token = 0;     // per rank
  int64_t state_bytes_per_sequence = 0;  // per rank
  double free_bytes = 0;              // usable - weights - states (negative: does not fit)
  int64_t kv_tokens = 0;              // KV capacity per rank (INT64_MAX: no KV layers here)
  double memory_seconds = 0;          // read_bytes / bandwidth
  double network_seconds = 0;         // the collectives this stage issues, per token
};

struct EpComparison {
  // Per step, MoE collectives only, for the two MoE exchanges at batch 1 and at large_batch.
  double all_to_all_batch1 = 0, all_reduce_batch1 = 0;
  double all_to_all_large = 0, all_reduce_large = 0;
  int64_t large_batch = 0;
};

struct LayoutPlan {
  Layout layout;
  bool valid = true;
  std::string problem;          // why the model cannot be laid out so (valid == false)
  int64_t kv_heads_per_rank = 0;
  int64_t kv_replication = 1;   // copies of each KV head across the TP ranks
  MoeComm moe = MoeComm::AllReduce;  // EP: the exchange used (cheaper at batch 1)
  std::vector<StagePlan> stages;
  std::vector<CollectiveCall> collectives;      // per decode step at batch 1
  std::vector<CollectiveCall> collectives_alt;  // EP: the other MoE exchange
  EpComparison ep;                              // EP only
  double weight_bytes = 0;      // max over ranks
  int64_t kv_bytes_per_token = 0;  // max over ranks
  int64_t kv_tokens = 0;        // min over ranks (INT64_MAX: no KV anywhere)
  int64_t kv_tokens_total = 0;  // tokens the layout holds: x e under EP all-to-all (DP attention)
  bool fits = false;
  std::string fit_problem;      // why not
  int64_t calls_per_token = 0;
  double wire_bytes_per_token = 0;
  double memory_seconds = 0, memory_seconds_worst = 0, network_seconds = 0;
  double tokens_per_second = 0;            // 1 / (memory + network)
  double pipelined_tokens_per_second = 0;  // pp > 1: 1 / slowest stage (>= p sequences in flight)
  std::vector<std::string> notes;
};

// One layout (throws zen::Error when its ranks differ from o.nodes or the model cannot be
// split so).
LayoutPlan plan_layout(const ModelConfig& cfg, const Options& o, const Layout& layout);

// Every candidate layout: fitting ones first by the tokens/s bound, then those that do not
// fit, then the invalid ones (valid == false). Throws zen::Error when none fits.
std::vector<LayoutPlan> plan_all(const ModelConfig& cfg, const Options& o);

}  // namespace zen::plan
