// Gated DeltaNet: the linear-attention layer of Qwen3-Next and Qwen3.5 / Zen6, computed as
// transformers does (models/qwen3_next, models/qwen3_5):
//   [q k v] = conv1d_silu(in_proj_qkv(x))     causal depthwise conv (kernel K) with rolling state
//   q, k    = l2norm per head, q /= sqrt(Dk)   (Hk heads; value head h uses key head h / (Hv/Hk))
//   beta    = sigmoid(b),  g = -exp(A_log) * softplus(a + dt_bias)        per value head
//   S_t     = exp(g_t) S_{t-1};  S_t += k_t (beta_t (v_t - k_t^T S_t))^T  S: [Dk, Dv] in f32
//   o_t     = q_t^T S_t;  y = out_proj(rmsnorm(o) * norm_w * silu(z))
// Two forms of the delta rule: recurrent (token by token: decode, speculative verify) and
// chunked (prefill: chunks of kGdnChunk tokens solved with a UT transform, as HF's
// torch_chunk_gated_delta_rule). Chunks start at ABSOLUTE positions that are multiples of
// kGdnChunk, so a prefill split across forward calls at such multiples is bit-identical to one
// call (the state carried between calls is the state at the chunk boundary). One-token chunks
// (a decode step, or a piece of one token) take the recurrent step, so that holds for them too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/aligned.h"
#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/model.h"

namespace zen {

inline constexpr int64_t kGdnChunk = 64;

struct GdnShape {
  int64_t hidden = 0;                        // H
  int64_t num_k_heads = 0, num_v_heads = 0;  // Hk, Hv (Hv a multiple of Hk)
  int64_t k_head_dim = 0, v_head_dim = 0;    // Dk, Dv
  int64_t conv_kernel = 0;                   // K
  float eps = 1e-6f;                         // the output RMSNorm's
  // Value heads in llama.cpp's tiled order ([r][Hk]) instead of HF's grouped order ([Hk][r]).
  // Every per-value-head tensor of a layer (v, z, b, a rows, conv channels, A, dt_bias,
  // out_proj columns) follows the same order, so only the key head a value head reads differs.
  bool v_heads_tiled = false;

  static GdnShape from_config(const ModelConfig& cfg);
  int64_t key_dim() const { return num_k_heads * k_head_dim; }
  int64_t value_dim() const { return num_v_heads * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q, k, v channels
  int64_t group() const { return num_v_heads / num_k_heads; }
  // The value head that is member i (< group()) of key head kh's group.
  int64_t value_head(int64_t kh, int64_t i) const { return v_heads_tiled ? i * num_k_heads + kh : kh * group() + i; }
  // Per-layer recurrent state in a StatePool slot: the conv window [K-1, conv_dim] (oldest
  // input first), then the delta-rule state [Hv, Dk, Dv].
  int64_t conv_state_floats() const { return (conv_kernel - 1) * conv_dim(); }
  int64_t head_state_floats() const { return k_head_dim * v_head_dim; }
  int64_t state_floats() const { return conv_state_floats() + num_v_heads * head_state_floats(); }
};

// How prefill runs the delta rule. Auto: one-token slices and slices with a state history
// recurrently, the rest chunked. Recurrent: everything token by token (tests, benchmarks).
enum class GdnMode { Auto, Recurrent };

namespace gdn {

// Causal depthwise conv1d + SiLU over n tokens of one sequence, continuing from the window
// `state` ([K-1, C], oldest first; updated to the last K-1 inputs).
// x: [n, ldx] (channels [0, C) used); w: [K, C]; out: [n, C].
void conv1d_silu(const float* x, int64_t ldx, int64_t n, int64_t channels, int64_t kernel, const float* w,
                 float* state, float* out);

// One value head's inputs over n tokens, token-strided. q and k are already l2-normalised
// (q also scaled by 1/sqrt(Dk)); g is the log decay, beta the write strength.
struct HeadInputs {
  const float* q;     // [n, ld_qkv] -> Dk per token
  const float* k;     // [n, ld_qkv] -> Dk per token
  const float* v;     // [n, ld_qkv] -> Dv per token
  int64_t ld_qkv;
  const float* g;     // [n, ld_gb]
  const float* beta;  // [n, ld_gb]
  int64_t ld_gb;
  float* out;         // [n, ld_out] -> Dv per token
  int64_t ld_out;
};

// Token by token (kernels/cpu/delta_rule.h); state: [Dk, Dv]. Without a history, each token's
// state update is fused with the next token's S^T k, S^T q pass (one pass over the state per
// token), bit-identical to n one-token calls. When history is non-null, the state after
// token i is also written to history[i] ([Dk, Dv] each).
void recurrent(const HeadInputs& in, int64_t n, int64_t dk, int64_t dv, float* state, float* const* history = nullptr);

// Chunked form; the tokens sit at absolute positions [pos0, pos0 + n) and chunks break at
// multiples of kGdnChunk; a chunk of one token takes the recurrent step (as decode does).
// scratch: chunk_scratch_floats(dk, dv) floats.
void chunked(const HeadInputs& in, int64_t n, int64_t pos0, int64_t dk, int64_t dv, float* state, float* scratch);
// The same for `count` value heads that share their q and k (one key head's group): their
// q k^T and k k^T are computed once per chunk. Each head's result is bit-identical to the
// one-head call. states[h]: [Dk, Dv]; scratch: chunk_scratch_floats(dk, dv, count) floats.
void chunked(const HeadInputs* heads, float* const* states, int64_t count, int64_t n, int64_t pos0, int64_t dk,
             int64_t dv, float* scratch);
int64_t chunk_scratch_floats(int64_t dk, int64_t dv, int64_t heads = 1);

// out = x / sqrt(sum(x^2) + 1e-6) (HF/FLA l2norm), n entries; out may alias x.
void l2norm(const float* x, int64_t n, float* out);
float softplus(float x);  // torch's: x above 20 passes through

}  // namespace gdn

struct GdnWeights {
  // Qwen3-Next (fused, grouped per key head g: [q_g (Dk) | k_g (Dk) | v_g (r*Dv) | z_g (r*Dv)]
  // and [b_g (r) | a_g (r)], r = Hv/Hk):
  Linear in_qkvz;  // [2*Hk*Dk + 2*Hv*Dv, H]
  Linear in_ba;    // [2*Hv, H] (also with GGUF's split qkvz: llama.cpp keeps ba fused)
  // Qwen3.5 (separate):
  Linear in_qkv;  // [conv_dim, H]: q heads, k heads, v heads
  Linear in_z;    // [Hv*Dv, H]
  Linear in_b;    // [Hv, H]
  Linear in_a;    // [Hv, H]
  std::vector<float> conv_w;   // [K, conv_dim] (stored [conv_dim, 1, K])
  std::vector<float> neg_A;    // [Hv] -exp(A_log)
  std::vector<float> dt_bias;  // [Hv]
  std::vector<float> norm;     // [Dv] gated RMSNorm gain (plain, not zero-centred)
  Linear out;                  // [H, Hv*Dv]
  bool fused = false;
};

// A small f32/f16/bf16 tensor (norms, biases, per-head parameters) as f32, taken from the
// ledger; empty (and the problem recorded in the ledger) when absent or of another dtype.
std::vector<float> take_f32_vector(Checkpoint& c, const std::string& name, const std::vector<int64_t>& shape);

// A tensor-parallel rank's key heads [key_heads) of the layer and the value heads that read
// them (everything when whole): the q, k, v channels, z / b / a rows, conv channels, A and
// dt_bias of those heads, and out_proj's columns (row-parallel: the ranks' outputs sum).
struct GdnShard {
  bool whole = true;
  dist::Range key_heads;
};
// This rank's shape: s with its own key and value heads.
GdnShape local_gdn_shape(const GdnShape& s, const GdnShard& shard);

// prefix: "model.layers.N.linear_attn." (or under model.language_model.); with `gguf`,
// "blk.N." and llama.cpp's qwen35 names and forms (ssm_a = -exp(A_log), conv [C, K]).
// s is the whole layer's shape; the weights bound are the shard's (local_gdn_shape).
GdnWeights bind_gdn(Checkpoint& c, const std::string& prefix, const GdnShape& s, bool fused, const QuantConfig& quant,
                    bool gguf = false, const GdnShard& shard = {});

// Activation scratch of GDN layers, grown on demand.
struct GdnScratch {
  std::vector<float> proj;       // [n, max(qkvz, conv_dim)] projections (fused layout)
  std::vector<float> mixed;      // [n, conv_dim] conv input
  std::vector<float> conv;       // [n, conv_dim] conv output, then normalised q k and v
  std::vector<float> z;          // [n, Hv*Dv]
  std::vector<float> ba;         // [n, 2*Hv] fused b, a
  std::vector<float> b, a;       // [n, Hv]
  std::vector<float> g, beta;    // [n, Hv]
  std::vector<float> core;       // [n, Hv*Dv] delta-rule output, then gated-normed
  AlignedVector<float> chunk;    // [threads, chunk_scratch_floats] (panels on cache lines)
  std::vector<int64_t> seq_start;  // [seqs + 1] first flat token of each sequence
  std::vector<float*> history;     // [threads, longest state_history] per-head history targets
};

// One GDN layer over a batch: xn [n, H] (the normed input) -> y [n, H]. Each sequence's
// state lives in batch.states->slot(seq.state_slot) at `state_offset` floats; the state after
// every token is copied to the state_history slots when a slice asks for it.
void gdn_forward(const GdnWeights& w, const GdnShape& s, int64_t state_offset, const ForwardBatch& batch,
                 const FlatBatch& flat, const float* xn, float* y, GdnMode mode, GdnScratch& scratch,
                 ThreadPool& pool);

}  // namespace zen
