#include "model/gated_delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/cpu/delta_rule.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"

namespace zen {

GdnShape GdnShape::from_config(const ModelConfig& cfg) {
  GdnShape s;
  s.hidden = cfg.hidden_size;
  s.num_k_heads = cfg.linear_num_key_heads;
  s.num_v_heads = cfg.linear_num_value_heads;
  s.k_head_dim = cfg.linear_key_head_dim;
  s.v_head_dim = cfg.linear_value_head_dim;
  s.conv_kernel = cfg.linear_conv_kernel_dim;
  s.eps = static_cast<float>(cfg.rms_norm_eps);
  s.v_heads_tiled = cfg.linear_v_heads_tiled;
  return s;
}

namespace gdn {
namespace {

// Row block of the triangular products (a multiple of the GEMM panel's 16 columns).
constexpr int64_t kTriBlock = 16;

// Scratch of one chunk step (L <= C = kGdnChunk tokens) of a group of value heads that share
// one key head. Packed matrices are GEMM B operands (kernels::pack_b_f32's panels).
struct ChunkScratch {
  // Shared by the group: its q and k.
  float* X;    // [2C, Dk] q rows (0..L-1) then k rows (L..2L-1)
  float* Kt;   // [Dk, C] k^T
  float* Ktp;  // k^T packed ([Dk, 16] panels)
  float* G;    // [2C, C] q k^T (rows 0..L-1) and k k^T (rows C..C+L-1), lower 16-blocks only
  // Per value head, reused by the next one.
  float* cum;    // [C] cumulative log decay inside the chunk
  float* e;      // [C] exp(cum_i)
  float* tail;   // [C] exp(cum_last - cum_j)
  float* decay;  // [C] one row of exp(cum_i - cum_j)
  float* betas;  // [C] beta_i
  float* QK;     // [C, C] decayed causal q k^T
  float* T;      // [C, C] -A (A = beta_i k_i k_j^T exp(cum_i - cum_j), j < i), then (I + A)^-1 diag(beta)
  float* KE;     // [C, Dk] -exp(cum_i) k_i
  float* Yp;     // v - exp(cum) k S, packed ([C, 16] panels)
  float* VNp;    // v_new, packed
  float* KdT;    // [Dk, C] k_j^T exp(cum_last - cum_j)
  // Per value head for a whole call: the state, packed (panels of [Dk, 16]).
  float* Sp;  // [heads, packed Dk x Dv]
  int64_t state_floats;

  ChunkScratch(float* base, int64_t dk, int64_t dv) {
    const int64_t C = kGdnChunk;
    float* at = base;
    auto take = [&](int64_t floats) {
      float* p = at;
      at += floats;
      return p;
    };
    X = take(2 * C * dk);
    Kt = take(dk * C);
    Ktp = take(kernels::packed_b_floats(dk, C));
    G = take(2 * C * C);
    cum = take(C);
    e = take(C);
    tail = take(C);
    decay = take(C);
    betas = take(C);
    QK = take(C * C);
    T = take(C * C);
    KE = take(C * dk);
    Yp = take(kernels::packed_b_floats(C, dv));
    VNp = take(kernels::packed_b_floats(C, dv));
    KdT = take(dk * C);
    state_floats = kernels::packed_b_floats(dk, dv);
    Sp = at;
  }
  static int64_t floats(int64_t dk, int64_t dv, int64_t heads) {
    const int64_t C = kGdnChunk;
    return 2 * C * dk + dk * C + kernels::packed_b_floats(dk, C) + 2 * C * C + 5 * C + 2 * C * C + C * dk +
           2 * kernels::packed_b_floats(C, dv) + dk * C + heads * kernels::packed_b_floats(dk, dv);
  }
};

// Cp (panels of [c_rows, 16]) rows [row0, row0 + M) = A[M, K] Bp + beta Cp: all 16 lanes of
// every panel are written (padding columns of Bp are zero, so they stay zero).
void gemm_into_panels(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* Bp, int64_t b_rows,
                      float* Cp, int64_t c_rows, int64_t row0, float beta) {
  const int64_t P = kernels::kGemmPanel;
  for (int64_t j = 0; j < N; j += P)
    kernels::gemm_f32_packed(M, P, K, A, lda, Bp + j * b_rows, b_rows, Cp + j * c_rows + row0 * P, P, beta);
}

// The group's q k^T and k k^T over the chunk's L tokens from t0: G's lower 16-row blocks.
void chunk_products(const HeadInputs& in, int64_t t0, int64_t L, int64_t dk, ChunkScratch& c) {
  const int64_t C = kGdnChunk;
  const auto row_bytes = static_cast<size_t>(dk) * sizeof(float);
  for (int64_t i = 0; i < L; ++i) {
    const float* q = in.q + (t0 + i) * in.ld_qkv;
    const float* k = in.k + (t0 + i) * in.ld_qkv;
    std::memcpy(c.X + i * dk, q, row_bytes);
    std::memcpy(c.X + (L + i) * dk, k, row_bytes);
    for (int64_t d = 0; d < dk; ++d) c.Kt[d * C + i] = k[d];
  }
  kernels::pack_b_f32(dk, L, c.Kt, C, c.Ktp);
  for (int64_t b = 0; b < L; b += kTriBlock) {  // blocks past the diagonal are masked anyway
    const int64_t rows = std::min(kTriBlock, L - b), cols = std::min(L, b + kTriBlock);
    kernels::gemm_f32_packed(rows, cols, dk, c.X + b * dk, dk, c.Ktp, dk, c.G + b * C, C, 0.0f);
    kernels::gemm_f32_packed(rows, cols, dk, c.X + (L + b) * dk, dk, c.Ktp, dk, c.G + (C + b) * C, C, 0.0f);
  }
}

// One value head over the chunk (chunk_products done), on its packed state Sp [Dk, Dv], as HF's
// torch_chunk_gated_delta_rule computes a chunk, regrouped so the state enters once and the
// decays and beta ride in GEMM operands:
//   v_new = (I + A)^-1 diag(beta) (v - exp(cum) k S)        (= U - W S)
//   out   = exp(cum) q S + QK v_new
//   S     = exp(cum_last) S + (k exp(cum_last - cum))^T v_new
void chunk_head(const HeadInputs& in, int64_t t0, int64_t L, int64_t dk, int64_t dv, float* Sp, ChunkScratch& c) {
  const int64_t C = kGdnChunk;
  float acc = 0.0f;
  for (int64_t i = 0; i < L; ++i) {
    acc += in.g[(t0 + i) * in.ld_gb];
    c.cum[i] = acc;
    c.betas[i] = in.beta[(t0 + i) * in.ld_gb];
  }
  const float last = c.cum[L - 1];
  kernels::exp_f32(c.cum, L, c.e);
  for (int64_t j = 0; j < L; ++j) c.tail[j] = last - c.cum[j];
  kernels::exp_f32(c.tail, L, c.tail);
  // The decay exp(cum_i - cum_j) and causal masks on q k^T and k k^T (the latter times -beta_i).
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j <= i; ++j) c.decay[j] = c.cum[i] - c.cum[j];
    kernels::exp_f32(c.decay, i + 1, c.decay);
    float* qk = c.QK + i * C;
    float* a = c.T + i * C;
    kernels::mul_f32(c.G + i * C, c.decay, i + 1, qk);
    std::fill(qk + i + 1, qk + L, 0.0f);
    kernels::mul_f32(c.G + (C + i) * C, c.decay, i, a);
    kernels::scale_f32(-c.betas[i], a, i, a);
  }
  kernels::unit_lower_inverse_f32(L, c.T, C);
  for (int64_t i = 0; i < L; ++i) kernels::mul_f32(c.T + i * C, c.betas, i + 1, c.T + i * C);
  // Y = v - exp(cum) k S, in panels.
  for (int64_t i = 0; i < L; ++i) kernels::scale_f32(-c.e[i], c.X + (L + i) * dk, dk, c.KE + i * dk);
  kernels::pack_b_f32(L, dv, in.v + t0 * in.ld_qkv, in.ld_qkv, c.Yp);
  gemm_into_panels(L, dv, dk, c.KE, dk, Sp, dk, c.Yp, L, 0, 1.0f);
  // out = q S here; the exp(cum) row scale joins the QK v_new product below.
  float* out = in.out + t0 * in.ld_out;
  kernels::gemm_f32_packed(L, dv, dk, c.X, dk, Sp, dk, out, in.ld_out, 0.0f);
  // v_new = T Y, and out = exp(cum) out + QK v_new: both lower-triangular, so each 16-row block
  // stops at its diagonal block.
  for (int64_t b = 0; b < L; b += kTriBlock) {
    const int64_t rows = std::min(kTriBlock, L - b), depth = std::min(L, b + kTriBlock);
    gemm_into_panels(rows, dv, depth, c.T + b * C, C, c.Yp, L, c.VNp, L, b, 0.0f);
  }
  for (int64_t b = 0; b < L; b += kTriBlock) {
    const int64_t rows = std::min(kTriBlock, L - b), depth = std::min(L, b + kTriBlock);
    kernels::gemm_f32_packed(rows, dv, depth, c.QK + b * C, C, c.VNp, L, out + b * in.ld_out, in.ld_out, 0.0f,
                             c.e + b);
  }
  // S = exp(cum_last) S + (k exp(cum_last - cum))^T v_new
  for (int64_t d = 0; d < dk; ++d) kernels::mul_f32(c.Kt + d * C, c.tail, L, c.KdT + d * C);
  gemm_into_panels(dk, dv, L, c.KdT, C, c.VNp, L, Sp, dk, 0, std::exp(last));
}

}  // namespace

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void l2norm(const float* x, int64_t n, float* out) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum + 1e-6f);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
}

void conv1d_silu(const float* x, int64_t ldx, int64_t n, int64_t channels, int64_t kernel, const float* w,
                 float* state, float* out) {
  const int64_t hist = kernel - 1;
  // Input row at relative time s (negative: from the window).
  auto input = [&](int64_t s) { return s < 0 ? state + (hist + s) * channels : x + s * ldx; };
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * channels;
    std::fill_n(o, channels, 0.0f);
    for (int64_t i = 0; i < kernel; ++i) {
      const float* row = input(t - hist + i);
      const float* wi = w + i * channels;
      for (int64_t c = 0; c < channels; ++c) o[c] += wi[c] * row[c];
    }
    // silu(o) as silu(o) * 1, exactly: the vectorised exp of kernels::silu_mul instead of one
    // std::exp per channel (Zen6: 10,240 channels x 48 layers per token).
    thread_local std::vector<float> ones;
    if (static_cast<int64_t>(ones.size()) < channels) ones.assign(static_cast<size_t>(channels), 1.0f);
    kernels::silu_mul(o, ones.data(), channels, o);
  }
  // New window: the last K-1 inputs.
  if (hist == 0) return;
  if (n >= hist) {
    for (int64_t r = 0; r < hist; ++r)
      std::memcpy(state + r * channels, x + (n - hist + r) * ldx, static_cast<size_t>(channels) * sizeof(float));
  } else {
    std::memmove(state, state + n * channels, static_cast<size_t>((hist - n) * channels) * sizeof(float));
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(state + (hist - n + r) * channels, x + r * ldx, static_cast<size_t>(channels) * sizeof(float));
  }
}

void recurrent(const HeadInputs& in, int64_t n, int64_t dk, int64_t dv, float* S, float* const* history) {
  constexpr int64_t kMaxDv = 4096;  // ModelConfig::validate bounds head dims by this
  ZEN_CHECK(dv <= kMaxDv, "value head dim ", dv);
  float deltas[2][kMaxDv];  // consecutive tokens' deltas: a token's update follows the next one's gather
  auto token = [&](int64_t t) {
    return kernels::DeltaRuleToken{in.q + t * in.ld_qkv, in.k + t * in.ld_qkv, in.v + t * in.ld_qkv,
                                   std::exp(in.g[t * in.ld_gb]), in.beta[t * in.ld_gb], in.out + t * in.ld_out,
                                   deltas[t & 1]};
  };
  if (n <= 0) return;
  if (history != nullptr) {  // every token's state is recorded: no fusion across tokens
    for (int64_t t = 0; t < n; ++t) {
      kernels::delta_rule_step_f32(S, dk, dv, token(t));
      if (history[t] != nullptr && history[t] != S)
        std::memcpy(history[t], S, static_cast<size_t>(dk * dv) * sizeof(float));
    }
    return;
  }
  // All tokens at once: strip by strip of the state, one pass per token, each update fused
  // with the next token's gather (bit-identical to one-token calls, see delta_rule.h).
  thread_local std::vector<kernels::DeltaRuleToken> tokens;
  tokens.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) tokens[static_cast<size_t>(t)] = token(t);
  kernels::delta_rule_run_f32(S, dk, dv, n, tokens.data());
}

int64_t chunk_scratch_floats(int64_t dk, int64_t dv, int64_t heads) { return ChunkScratch::floats(dk, dv, heads); }

void chunked(const HeadInputs* heads, float* const* states, int64_t count, int64_t n, int64_t pos0, int64_t dk,
             int64_t dv, float* scratch) {
  for (int64_t h = 1; h < count; ++h)
    ZEN_CHECK(heads[h].q == heads[0].q && heads[h].k == heads[0].k && heads[h].ld_qkv == heads[0].ld_qkv,
              "chunked: a group's heads must share q and k");
  ChunkScratch c(scratch, dk, dv);
  bool packed = false;  // the states live in c.Sp while chunks run, row-major otherwise
  auto set_packed = [&](bool want) {
    if (packed == want) return;
    for (int64_t h = 0; h < count; ++h) {
      float* sp = c.Sp + h * c.state_floats;
      if (want) kernels::pack_b_f32(dk, dv, states[h], dv, sp);
      else kernels::unpack_b_f32(dk, dv, sp, states[h], dv);
    }
    packed = want;
  };
  int64_t t = 0;
  while (t < n) {
    const int64_t pos = pos0 + t;
    const int64_t chunk_end = (pos / kGdnChunk + 1) * kGdnChunk;  // next absolute multiple
    const int64_t L = std::min(n - t, chunk_end - pos);
    if (L == 1) {
      // A one-token chunk takes the recurrent step, exactly as decode does: then a prefill
      // split at multiples of the chunk stays bit-identical even when a piece is one token.
      set_packed(false);
      for (int64_t h = 0; h < count; ++h) {
        HeadInputs one = heads[h];
        one.q += t * one.ld_qkv;
        one.k += t * one.ld_qkv;
        one.v += t * one.ld_qkv;
        one.g += t * one.ld_gb;
        one.beta += t * one.ld_gb;
        one.out += t * one.ld_out;
        recurrent(one, 1, dk, dv, states[h]);
      }
    } else {
      set_packed(true);
      chunk_products(heads[0], t, L, dk, c);
      for (int64_t h = 0; h < count; ++h) chunk_head(heads[h], t, L, dk, dv, c.Sp + h * c.state_floats, c);
    }
    t += L;
  }
  set_packed(false);
}

void chunked(const HeadInputs& in, int64_t n, int64_t pos0, int64_t dk, int64_t dv, float* state, float* scratch) {
  chunked(&in, &state, 1, n, pos0, dk, dv, scratch);
}

}  // namespace gdn

std::vector<float> take_f32_vector(Checkpoint& c, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorView* t = c.take(name, shape);
  if (t == nullptr) return {};
  if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16) {
    c.note_mismatch(name + ": dtype " + dtype_name(t->dtype) + " is not supported for vectors");
    return {};
  }
  if (t->shape != shape) return {};  // recorded as a mismatch by take()
  std::vector<float> out(static_cast<size_t>(t->numel()));
  kernels::dequantize_row(t->dtype, t->data, out.data(), t->numel());
  return out;
}

GdnShape local_gdn_shape(const GdnShape& s, const GdnShard& shard) {
  if (shard.whole) return s;
  GdnShape local = s;
  local.num_k_heads = shard.key_heads.size();
  local.num_v_heads = shard.key_heads.size() * s.group();
  return local;
}

namespace {

// Ranges scaled by m and shifted by offset (head ranges -> row ranges).
std::vector<dist::Range> scaled(const std::vector<dist::Range>& heads, int64_t m, int64_t offset = 0) {
  std::vector<dist::Range> out;
  for (const dist::Range& h : heads) out.push_back({offset + h.begin * m, offset + h.end * m});
  return out;
}

std::vector<float> pick(const std::vector<float>& all, const std::vector<dist::Range>& ranges) {
  if (all.empty()) return all;
  std::vector<float> out;
  for (const dist::Range& r : ranges) out.insert(out.end(), all.begin() + r.begin, all.begin() + r.end);
  return out;
}

}  // namespace

GdnWeights bind_gdn(Checkpoint& c, const std::string& prefix, const GdnShape& s, bool fused, const QuantConfig& quant,
                    bool gguf, const GdnShard& shard) {
  GdnWeights w;
  w.fused = fused;
  const int64_t H = s.hidden, Hv = s.num_v_heads, C = s.conv_dim(), K = s.conv_kernel;
  const int64_t Hk = s.num_k_heads, Dk = s.k_head_dim, Dv = s.v_head_dim, r = s.group();
  // The shard's value heads (in the layer's order) and the rows each projection keeps.
  const dist::Range kh = shard.whole ? dist::Range{0, Hk} : shard.key_heads;
  std::vector<dist::Range> v_heads;
  if (!s.v_heads_tiled) v_heads = {{kh.begin * r, kh.end * r}};
  else
    for (int64_t i = 0; i < r; ++i) v_heads.push_back({i * Hk + kh.begin, i * Hk + kh.end});
  std::vector<dist::Range> qkv_rows = {{kh.begin * Dk, kh.end * Dk}, {s.key_dim() + kh.begin * Dk, s.key_dim() + kh.end * Dk}};
  for (const dist::Range& v : scaled(v_heads, Dv, 2 * s.key_dim())) qkv_rows.push_back(v);
  const int64_t group_width = 2 * Dk + 2 * r * Dv;  // the fused qkvz rows of one key head
  const std::vector<dist::Range> qkvz_rows = {{kh.begin * group_width, kh.end * group_width}};
  const std::vector<dist::Range> ba_rows = {{kh.begin * 2 * r, kh.end * 2 * r}};

  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, const std::vector<dist::Range>& keep) {
    if (shard.whole) return Linear::bind(c, prefix + name, {rows, cols}, quant);
    return Linear::bind_slice(c, prefix + name, {rows, cols}, quant, keep, {0, cols});
  };
  if (fused && gguf) {
    // llama.cpp's qwen3next: ba stays fused (ssm_ba); qkvz is split into attn_qkv (q heads | k
    // heads | v heads, grouped) and attn_gate by its converter, or kept fused as ssm_in by older ones.
    w.in_ba = matrix("ssm_ba.weight", 2 * Hv, H, ba_rows);
    if (c.has(prefix + "ssm_in.weight")) {
      w.in_qkvz = matrix("ssm_in.weight", 2 * s.key_dim() + 2 * s.value_dim(), H, qkvz_rows);
    } else {
      w.fused = false;
      w.in_qkv = matrix("attn_qkv.weight", C, H, qkv_rows);
      w.in_z = matrix("attn_gate.weight", s.value_dim(), H, scaled(v_heads, Dv));
    }
  } else if (fused) {
    w.in_qkvz = matrix("in_proj_qkvz.weight", 2 * s.key_dim() + 2 * s.value_dim(), H, qkvz_rows);
    w.in_ba = matrix("in_proj_ba.weight", 2 * Hv, H, ba_rows);
  } else {
    w.in_qkv = matrix(gguf ? "attn_qkv.weight" : "in_proj_qkv.weight", C, H, qkv_rows);
    w.in_z = matrix(gguf ? "attn_gate.weight" : "in_proj_z.weight", s.value_dim(), H, scaled(v_heads, Dv));
    w.in_b = matrix(gguf ? "ssm_beta.weight" : "in_proj_b.weight", Hv, H, v_heads);
    w.in_a = matrix(gguf ? "ssm_alpha.weight" : "in_proj_a.weight", Hv, H, v_heads);
  }
  // The conv kernel: HF [C, 1, K], GGUF [C, K] (ne0 = K); the same bytes. Kept: the shard's
  // channels (those of its q, k, v rows), as [K, local channels].
  const std::vector<float> conv = gguf ? take_f32_vector(c, prefix + "ssm_conv1d.weight", {C, K})
                                       : take_f32_vector(c, prefix + "conv1d.weight", {C, 1, K});
  if (!conv.empty()) {
    std::vector<int64_t> channels;
    for (const dist::Range& range : qkv_rows)
      for (int64_t ch = range.begin; ch < range.end; ++ch) channels.push_back(ch);
    const auto Cl = static_cast<int64_t>(channels.size());
    w.conv_w.resize(static_cast<size_t>(K * Cl));
    for (int64_t j = 0; j < Cl; ++j)
      for (int64_t i = 0; i < K; ++i) w.conv_w[i * Cl + j] = conv[channels[static_cast<size_t>(j)] * K + i];
  }
  if (gguf) {
    w.neg_A = take_f32_vector(c, prefix + "ssm_a", {Hv});  // the converter stored -exp(A_log)
    w.dt_bias = take_f32_vector(c, prefix + "ssm_dt.bias", {Hv});
  } else {
    const std::vector<float> a_log = take_f32_vector(c, prefix + "A_log", {Hv});
    for (float x : a_log) w.neg_A.push_back(-std::exp(x));
    w.dt_bias = take_f32_vector(c, prefix + "dt_bias", {Hv});
  }
  w.neg_A = pick(w.neg_A, v_heads);
  w.dt_bias = pick(w.dt_bias, v_heads);
  w.norm = take_f32_vector(c, prefix + (gguf ? "ssm_norm.weight" : "norm.weight"), {s.v_head_dim});
  const std::string out = gguf ? "ssm_out.weight" : "out_proj.weight";
  if (shard.whole) w.out = Linear::bind(c, prefix + out, {H, s.value_dim()}, quant);
  else w.out = Linear::bind_slice(c, prefix + out, {H, s.value_dim()}, quant, {{0, H}}, scaled(v_heads, Dv));
  return w;
}

namespace {

template <typename Vector>
void grow(Vector& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Splits Qwen3-Next's fused qkvz projection into the Qwen3.5 layout:
// qkvz [n, Hk * (2Dk + 2rDv)] -> mixed [n, conv_dim] (q heads | k heads | v heads), z [n, Hv*Dv].
void unfuse_qkvz(const GdnShape& s, int64_t n, GdnScratch& sc) {
  const int64_t Hk = s.num_k_heads, Dk = s.k_head_dim, Dv = s.v_head_dim, r = s.group();
  const int64_t group_width = 2 * Dk + 2 * r * Dv, qkvz = Hk * group_width, C = s.conv_dim();
  const int64_t key_dim = s.key_dim(), value_dim = s.value_dim();
  const auto fsz = sizeof(float);
  for (int64_t t = 0; t < n; ++t) {
    const float* src = &sc.proj[t * qkvz];
    float* mixed = &sc.mixed[t * C];
    float* z = &sc.z[t * value_dim];
    for (int64_t g = 0; g < Hk; ++g) {
      const float* grp = src + g * group_width;
      std::memcpy(mixed + g * Dk, grp, Dk * fsz);
      std::memcpy(mixed + key_dim + g * Dk, grp + Dk, Dk * fsz);
      std::memcpy(mixed + 2 * key_dim + g * r * Dv, grp + 2 * Dk, r * Dv * fsz);
      std::memcpy(z + g * r * Dv, grp + 2 * Dk + r * Dv, r * Dv * fsz);
    }
  }
}

// And its fused ba projection: ba [n, Hk * 2r] (per key head: its r b's, then its r a's) -> b, a [n, Hv].
void unfuse_ba(const GdnShape& s, int64_t n, GdnScratch& sc) {
  const int64_t Hk = s.num_k_heads, r = s.group(), Hv = s.num_v_heads;
  const auto fsz = sizeof(float);
  for (int64_t t = 0; t < n; ++t) {
    const float* ba = &sc.ba[t * 2 * Hv];
    for (int64_t g = 0; g < Hk; ++g) {
      std::memcpy(&sc.b[t * Hv + g * r], ba + g * 2 * r, r * fsz);
      std::memcpy(&sc.a[t * Hv + g * r], ba + g * 2 * r + r, r * fsz);
    }
  }
}

// Value heads per work item of the delta rule: a key head's whole group (the chunked form
// computes their q k^T and k k^T once), unless single heads would keep more threads busy.
constexpr int64_t kMaxGroup = 64;
int64_t heads_per_item(int64_t seqs, int64_t key_heads, int64_t r, int64_t threads) {
  if (r > kMaxGroup) return 1;
  auto rounds = [&](int64_t items) { return (items + threads - 1) / threads; };
  return rounds(seqs * key_heads) * r <= rounds(seqs * key_heads * r) ? r : 1;
}

}  // namespace

void gdn_forward(const GdnWeights& w, const GdnShape& s, int64_t state_offset, const ForwardBatch& batch,
                 const FlatBatch& flat, const float* xn, float* y, GdnMode mode, GdnScratch& sc,
                 ThreadPool& pool) {
  const int64_t n = flat.size();
  const auto N = static_cast<size_t>(n);
  const int64_t C = s.conv_dim(), Hv = s.num_v_heads, Hk = s.num_k_heads;
  const int64_t Dk = s.k_head_dim, Dv = s.v_head_dim, VD = s.value_dim(), KD = s.key_dim();
  const int64_t r = s.group();
  if (batch.states == nullptr) fail("forward: a hybrid model needs a recurrent-state pool in the batch");

  // 1. Input projections.
  grow(sc.mixed, N * C);
  grow(sc.conv, N * C);
  grow(sc.z, N * VD);
  grow(sc.b, N * Hv);
  grow(sc.a, N * Hv);
  grow(sc.g, N * Hv);
  grow(sc.beta, N * Hv);
  grow(sc.core, N * VD);
  if (w.fused) {
    grow(sc.proj, N * static_cast<size_t>(2 * KD + 2 * VD));
    w.in_qkvz.matmul(xn, n, sc.proj.data(), pool);
    unfuse_qkvz(s, n, sc);
  } else {
    w.in_qkv.matmul(xn, n, sc.mixed.data(), pool);
    w.in_z.matmul(xn, n, sc.z.data(), pool);
  }
  if (w.in_ba.valid()) {  // Qwen3-Next, whether or not its qkvz is split (GGUF splits it)
    grow(sc.ba, N * 2 * Hv);
    w.in_ba.matmul(xn, n, sc.ba.data(), pool);
    unfuse_ba(s, n, sc);
  } else {
    w.in_b.matmul(xn, n, sc.b.data(), pool);
    w.in_a.matmul(xn, n, sc.a.data(), pool);
  }

  // 2. Per sequence: the causal conv over its tokens, from and into its conv window.
  const size_t seqs = batch.seqs.size();
  sc.seq_start.assign(seqs + 1, 0);
  for (size_t i = 0; i < seqs; ++i) sc.seq_start[i + 1] = sc.seq_start[i] + static_cast<int64_t>(batch.seqs[i].tokens.size());
  const int64_t conv_floats = s.conv_state_floats();
  for (size_t i = 0; i < seqs; ++i) {
    const SeqSlice& seq = batch.seqs[i];
    const int64_t t0 = sc.seq_start[i], len = sc.seq_start[i + 1] - t0;
    float* window = batch.states->slot(seq.state_slot) + state_offset;
    if (seq.state_history.empty()) {
      gdn::conv1d_silu(&sc.mixed[t0 * C], C, len, C, s.conv_kernel, w.conv_w.data(), window, &sc.conv[t0 * C]);
      continue;
    }
    for (int64_t t = 0; t < len; ++t) {  // one token at a time, recording each window
      gdn::conv1d_silu(&sc.mixed[(t0 + t) * C], C, 1, C, s.conv_kernel, w.conv_w.data(), window,
                       &sc.conv[(t0 + t) * C]);
      const int32_t hist = seq.state_history[static_cast<size_t>(t)];
      if (hist != seq.state_slot)
        std::memcpy(batch.states->slot(hist) + state_offset, window, static_cast<size_t>(conv_floats) * sizeof(float));
    }
  }

  // 3. Per token: l2-normalised q, k (q scaled), beta and the log decay g.
  const float q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dk)));
  pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = &sc.conv[t * C];
      for (int64_t h = 0; h < Hk; ++h) {
        float* q = row + h * Dk;
        gdn::l2norm(q, Dk, q);
        for (int64_t d = 0; d < Dk; ++d) q[d] *= q_scale;
        gdn::l2norm(row + KD + h * Dk, Dk, row + KD + h * Dk);
      }
      for (int64_t h = 0; h < Hv; ++h) {
        sc.beta[t * Hv + h] = 1.0f / (1.0f + std::exp(-sc.b[t * Hv + h]));
        sc.g[t * Hv + h] = w.neg_A[h] * gdn::softplus(sc.a[t * Hv + h] + w.dt_bias[h]);
      }
    }
  });

  // 4. The delta rule, one (sequence, group of value heads sharing a key head) per work item.
  const int64_t seq_count = static_cast<int64_t>(seqs);
  const int64_t group = heads_per_item(seq_count, Hk, r, pool.size());
  const int64_t groups = Hv / group;
  const int64_t scratch_floats = gdn::chunk_scratch_floats(Dk, Dv, group);
  if (mode == GdnMode::Auto) grow(sc.chunk, static_cast<size_t>(pool.size() * scratch_floats));
  size_t max_history = 0;
  for (const SeqSlice& seq : batch.seqs) max_history = std::max(max_history, seq.state_history.size());
  grow(sc.history, static_cast<size_t>(pool.size()) * max_history);
  pool.parallel_for(seq_count * groups, [&](int64_t begin, int64_t end, int thread) {
    float** history = sc.history.data() + static_cast<size_t>(thread) * max_history;
    gdn::HeadInputs heads[kMaxGroup];
    float* states[kMaxGroup];
    for (int64_t item = begin; item < end; ++item) {
      const auto i = static_cast<size_t>(item / groups);
      const int64_t g0 = item % groups * group, kh = g0 / r, i0 = g0 % r;  // members i0.. of key head kh
      const SeqSlice& seq = batch.seqs[i];
      const int64_t t0 = sc.seq_start[i], len = sc.seq_start[i + 1] - t0;
      float* slot_state = batch.states->slot(seq.state_slot) + state_offset + conv_floats;
      const float* row = &sc.conv[t0 * C];
      for (int64_t j = 0; j < group; ++j) {
        const int64_t h = s.value_head(kh, i0 + j);
        heads[j] = {row + kh * Dk, row + KD + kh * Dk, row + 2 * KD + h * Dv, C,
                    &sc.g[t0 * Hv + h], &sc.beta[t0 * Hv + h], Hv, &sc.core[t0 * VD + h * Dv], VD};
        states[j] = slot_state + h * Dk * Dv;
      }
      if (!seq.state_history.empty()) {
        for (int64_t j = 0; j < group; ++j) {
          const int64_t h = s.value_head(kh, i0 + j);
          for (size_t t = 0; t < seq.state_history.size(); ++t)
            history[t] = batch.states->slot(seq.state_history[t]) + state_offset + conv_floats + h * Dk * Dv;
          gdn::recurrent(heads[j], len, Dk, Dv, states[j], history);
        }
      } else if (mode == GdnMode::Recurrent || len == 1 || seq.recurrent_form) {
        for (int64_t j = 0; j < group; ++j) gdn::recurrent(heads[j], len, Dk, Dv, states[j]);
      } else {
        float* scratch = &sc.chunk[static_cast<size_t>(thread * scratch_floats)];
        gdn::chunked(heads, states, group, len, seq.pos, Dk, Dv, scratch);
      }
    }
  });

  // 5. Gated RMSNorm per (token, value head): rmsnorm(o) * w * silu(z); then out_proj.
  pool.parallel_for(n * Hv, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      float* o = &sc.core[item * Dv];  // [t, h] rows are contiguous: item = t * Hv + h
      kernels::rmsnorm(o, w.norm.data(), s.eps, Dv, o);
      kernels::silu_mul(&sc.z[item * Dv], o, Dv, o);
    }
  });
  w.out.matmul(sc.core.data(), n, y, pool);
}

}  // namespace zen
