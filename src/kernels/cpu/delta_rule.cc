#include "kernels/cpu/delta_rule.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/simd.h"

#if ZEN_HAVE_NEON
#include <arm_neon.h>
#endif

namespace zen::kernels {

namespace ref {

void delta_rule_gather_f32(const float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
  // delta holds S^T k and out holds S^T q until the last loop.
  for (int64_t j = 0; j < dv; ++j) t.delta[j] = t.out[j] = 0.0f;
  float kq = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    const float* row = S + i * dv;
    for (int64_t j = 0; j < dv; ++j) {
      t.delta[j] += t.k[i] * row[j];
      t.out[j] += t.q[i] * row[j];
    }
    kq += t.k[i] * t.q[i];
  }
  for (int64_t j = 0; j < dv; ++j) {
    t.delta[j] = t.beta * (t.v[j] - t.decay * t.delta[j]);
    t.out[j] = kq * t.delta[j] + t.decay * t.out[j];
  }
}

void delta_rule_update_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
  for (int64_t i = 0; i < dk; ++i) {
    float* row = S + i * dv;
    for (int64_t j = 0; j < dv; ++j) row[j] = row[j] * t.decay + t.k[i] * t.delta[j];
  }
}

void delta_rule_step_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
  ref::delta_rule_gather_f32(S, dk, dv, t);
  ref::delta_rule_update_f32(S, dk, dv, t);
}

}  // namespace ref

namespace {

// delta and out of column j from its S^T k and S^T q sums (the columns past the vector blocks,
// with the vector blocks' operations; inlined into SIMD callers, it runs as their FMAs).
inline void finish_column(float kv, float qs, int64_t j, float kq, const DeltaRuleToken& t) {
  t.delta[j] = t.beta * __builtin_fmaf(-t.decay, kv, t.v[j]);
  t.out[j] = __builtin_fmaf(kq, t.delta[j], t.decay * qs);
}

// Column j's gather in scalar FMAs over the rows in order.
inline void gather_column(const float* S, int64_t dk, int64_t dv, int64_t j, float kq, const DeltaRuleToken& t) {
  float kv = 0.0f, qs = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    kv = __builtin_fmaf(t.k[i], S[i * dv + j], kv);
    qs = __builtin_fmaf(t.q[i], S[i * dv + j], qs);
  }
  finish_column(kv, qs, j, kq, t);
}

#if ZEN_HAVE_X86_SIMD

ZEN_TARGET_AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float sum = hsum(acc);
  for (; i < n; ++i) sum = __builtin_fmaf(a[i], b[i], sum);
  return sum;
}

// delta and out of columns [j, j + 8 kVecs) from their S^T k and S^T q sums.
// Inlined: called out of line with kv and qs by pointer, GCC stores the accumulators to the
// stack on every row of the loop that precedes the call.
template <int kVecs>
ZEN_TARGET_AVX2 inline __attribute__((always_inline)) void finish_columns(const __m256* kv, const __m256* qs, int64_t j, float kq, const DeltaRuleToken& t) {
  const __m256 vdecay = _mm256_set1_ps(t.decay), vbeta = _mm256_set1_ps(t.beta), vkq = _mm256_set1_ps(kq);
#pragma GCC unroll 4
  for (int c = 0; c < kVecs; ++c) {
    const int64_t at = j + 8 * c;
    const __m256 d = _mm256_mul_ps(vbeta, _mm256_fnmadd_ps(vdecay, kv[c], _mm256_loadu_ps(t.v + at)));
    _mm256_storeu_ps(t.delta + at, d);
    _mm256_storeu_ps(t.out + at, _mm256_fmadd_ps(vkq, d, _mm256_mul_ps(vdecay, qs[c])));
  }
}

// Gather for columns [j, j + 8 kVecs): S^T k and S^T q in 2 kVecs register accumulators
// (kVecs 4: eight independent FMA chains, enough to cover the FMA latency).
// S: the block's first column, rows ld floats apart (the state, or a strip copied out of it);
// j: the block's first column in the token's v, delta and out.
template <int kVecs>
ZEN_TARGET_AVX2 void gather_block(const float* S, int64_t ld, int64_t dk, int64_t j, float kq, const DeltaRuleToken& t) {
  __m256 kv[kVecs], qs[kVecs];
#pragma GCC unroll 4
  for (int c = 0; c < kVecs; ++c) kv[c] = qs[c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < dk; ++i) {
    const __m256 kb = _mm256_broadcast_ss(t.k + i), qb = _mm256_broadcast_ss(t.q + i);
    const float* row = S + i * ld;
#pragma GCC unroll 4
    for (int c = 0; c < kVecs; ++c) {
      const __m256 s = _mm256_loadu_ps(row + 8 * c);
      kv[c] = _mm256_fmadd_ps(kb, s, kv[c]);
      qs[c] = _mm256_fmadd_ps(qb, s, qs[c]);
    }
  }
  finish_columns<kVecs>(kv, qs, j, kq, t);
}

// Update with prev, then gather next, for columns [j, j + 8 kVecs): each new S element is
// stored and fed to the next token's sums while in a register. kVecs 3 keeps prev's delta,
// six accumulators, the decay and three broadcasts in 13 of the 16 registers.
template <int kVecs>
ZEN_TARGET_AVX2 void update_gather_block(float* S, int64_t ld, int64_t dk, int64_t j, const DeltaRuleToken& prev,
                                         float kq, const DeltaRuleToken& next) {
  const __m256 vdecay = _mm256_set1_ps(prev.decay);
  __m256 delta[kVecs], kv[kVecs], qs[kVecs];
#pragma GCC unroll 4
  for (int c = 0; c < kVecs; ++c) {
    delta[c] = _mm256_loadu_ps(prev.delta + j + 8 * c);
    kv[c] = qs[c] = _mm256_setzero_ps();
  }
  const float *k_prev = prev.k, *k_next = next.k, *q_next = next.q;  // in registers across the stores
  for (int64_t i = 0; i < dk; ++i) {
    const __m256 kp = _mm256_broadcast_ss(k_prev + i);
    const __m256 kb = _mm256_broadcast_ss(k_next + i), qb = _mm256_broadcast_ss(q_next + i);
    float* row = S + i * ld;
#pragma GCC unroll 4
    for (int c = 0; c < kVecs; ++c) {
      const __m256 s = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * c), vdecay, _mm256_mul_ps(kp, delta[c]));
      _mm256_storeu_ps(row + 8 * c, s);
      kv[c] = _mm256_fmadd_ps(kb, s, kv[c]);
      qs[c] = _mm256_fmadd_ps(qb, s, qs[c]);
    }
  }
  finish_columns<kVecs>(kv, qs, j, kq, next);
}

ZEN_TARGET_AVX2 void gather_avx2(const float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
  const float kq = dot_avx2(t.k, t.q, dk);
  int64_t j = 0;
  for (; j + 32 <= dv; j += 32) gather_block<4>(S + j, dv, dk, j, kq, t);
  for (; j + 8 <= dv; j += 8) gather_block<1>(S + j, dv, dk, j, kq, t);
  for (; j < dv; ++j) gather_column(S, dk, dv, j, kq, t);
}

// Last row first: a gather ends on the last rows, so they are the ones still in L1 when S is
// larger than L1 (128 x 128: 64 KB, half of it stays).
ZEN_TARGET_AVX2 void update_avx2(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
  const __m256 vdecay = _mm256_set1_ps(t.decay);
  for (int64_t i = dk - 1; i >= 0; --i) {
    float* row = S + i * dv;
    const __m256 kb = _mm256_broadcast_ss(t.k + i);
    int64_t c = 0;
#pragma GCC unroll 4
    for (; c + 8 <= dv; c += 8)
      _mm256_storeu_ps(row + c, _mm256_fmadd_ps(_mm256_loadu_ps(row + c), vdecay,
                                                _mm256_mul_ps(kb, _mm256_loadu_ps(t.delta + c))));
    for (; c < dv; ++c) row[c] = __builtin_fmaf(row[c], t.decay, t.k[i] * t.delta[c]);
  }
}

ZEN_TARGET_AVX2 void update_gather_avx2(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& prev,
                                        const DeltaRuleToken& next) {
  const float kq = dot_avx2(next.k, next.q, dk);
  // Blocks of 3 vectors (6 accumulator chains, 15 registers), ending on blocks of 2 rather
  // than on a block of 1 (2 chains: latency-bound): 128 = 4 x 24 + 2 x 16.
  int64_t j = 0;
  while (dv - j >= 8) {
    const int64_t vecs = (dv - j) / 8;
    if (vecs >= 3 && vecs != 4) {
      update_gather_block<3>(S + j, dv, dk, j, prev, kq, next);
      j += 24;
    } else if (vecs >= 2) {
      update_gather_block<2>(S + j, dv, dk, j, prev, kq, next);
      j += 16;
    } else {
      update_gather_block<1>(S + j, dv, dk, j, prev, kq, next);
      j += 8;
    }
  }
  for (; j < dv; ++j) {
    float kv = 0.0f, qs = 0.0f;
    for (int64_t i = 0; i < dk; ++i) {
      float& s = S[i * dv + j];
      s = __builtin_fmaf(s, prev.decay, prev.k[i] * prev.delta[j]);
      kv = __builtin_fmaf(next.k[i], s, kv);
      qs = __builtin_fmaf(next.q[i], s, qs);
    }
    finish_column(kv, qs, j, kq, next);
  }
}

// The update alone for a block (the last token of a run), as update_avx2 computes it.
template <int kVecs>
ZEN_TARGET_AVX2 void update_block(float* S, int64_t ld, int64_t dk, int64_t j, const DeltaRuleToken& t) {
  const __m256 vdecay = _mm256_set1_ps(t.decay);
  __m256 delta[kVecs];
#pragma GCC unroll 4
  for (int c = 0; c < kVecs; ++c) delta[c] = _mm256_loadu_ps(t.delta + j + 8 * c);
  for (int64_t i = 0; i < dk; ++i) {
    const __m256 kb = _mm256_broadcast_ss(t.k + i);
    float* row = S + i * ld;
#pragma GCC unroll 4
    for (int c = 0; c < kVecs; ++c)
      _mm256_storeu_ps(row + 8 * c, _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * c), vdecay, _mm256_mul_ps(kb, delta[c])));
  }
}

// Tokens [t0, t1) over the strip of columns [j, j + 8 kVecs), held contiguously ([dk, 8 kVecs])
// in `strip`; token t0 - 1's update is fused with token t0's gather (t0 = 0: a gather alone).
template <int kVecs>
ZEN_TARGET_AVX2 void strip_tokens(float* strip, int64_t dk, int64_t j, int64_t t0, int64_t t1,
                                  const DeltaRuleToken* tokens, const float* kq) {
  constexpr int64_t kWidth = 8 * kVecs;
  int64_t t = t0;
  if (t == 0) gather_block<kVecs>(strip, kWidth, dk, j, kq[t++], tokens[0]);
  for (; t < t1; ++t) update_gather_block<kVecs>(strip, kWidth, dk, j, tokens[t - 1], kq[t], tokens[t]);
}

// Tokens per round over all strips: their q, k and v rows (about 1.5 KB each) stay in L2
// while every strip of S reads them.
constexpr int64_t kRunTokens = 64;

ZEN_TARGET_AVX2 void run_avx2(float* S, int64_t dk, int64_t dv, int64_t n, const DeltaRuleToken* tokens) {
  if (n == 1) {  // a decode step: the two passes over S in place, without the strip copies
    gather_avx2(S, dk, dv, tokens[0]);
    return update_avx2(S, dk, dv, tokens[0]);
  }
  // Strips as update_gather_avx2's blocks (3 vectors, ending on 2), copied strip-major into
  // `packed` (strip at column j: [dk, width] at dk * j): a strip's 128 rows are then
  // contiguous and stay in L1 (in the state they are a row apart, in a quarter of L1's sets).
  struct Strip {
    int64_t j, vecs;
  };
  thread_local std::vector<Strip> strips;
  thread_local std::vector<float> kq, packed;
  strips.clear();
  int64_t j = 0;
  while (dv - j >= 8) {
    const int64_t left = (dv - j) / 8, vecs = left >= 3 && left != 4 ? 3 : std::min<int64_t>(left, 2);
    strips.push_back({j, vecs});
    j += 8 * vecs;
  }
  const int64_t strip_cols = j;
  kq.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) kq[static_cast<size_t>(t)] = dot_avx2(tokens[t].k, tokens[t].q, dk);
  packed.resize(static_cast<size_t>(dk * strip_cols + 16));
  float* base = packed.data() + (16 - reinterpret_cast<uintptr_t>(packed.data()) / sizeof(float) % 16) % 16;
  auto copy_strips = [&](bool in) {
    for (const Strip& s : strips) {
      const auto bytes = static_cast<size_t>(8 * s.vecs) * sizeof(float);
      for (int64_t i = 0; i < dk; ++i) {
        float* p = base + dk * s.j + i * 8 * s.vecs;
        if (in) std::memcpy(p, S + i * dv + s.j, bytes);
        else std::memcpy(S + i * dv + s.j, p, bytes);
      }
    }
  };
  copy_strips(true);
  for (int64_t t0 = 0; t0 < n; t0 += kRunTokens) {
    const int64_t t1 = std::min(n, t0 + kRunTokens);
    for (const Strip& s : strips) {
      float* strip = base + dk * s.j;
      if (s.vecs == 3) strip_tokens<3>(strip, dk, s.j, t0, t1, tokens, kq.data());
      else if (s.vecs == 2) strip_tokens<2>(strip, dk, s.j, t0, t1, tokens, kq.data());
      else strip_tokens<1>(strip, dk, s.j, t0, t1, tokens, kq.data());
    }
  }
  for (const Strip& s : strips) {
    float* strip = base + dk * s.j;
    const int64_t width = 8 * s.vecs;
    if (s.vecs == 3) update_block<3>(strip, width, dk, s.j, tokens[n - 1]);
    else if (s.vecs == 2) update_block<2>(strip, width, dk, s.j, tokens[n - 1]);
    else update_block<1>(strip, width, dk, s.j, tokens[n - 1]);
  }
  copy_strips(false);
  for (; j < dv; ++j) {  // single columns in place, each token's gather then update
    for (int64_t t = 0; t < n; ++t) {
      const DeltaRuleToken& tok = tokens[t];
      float kv = 0.0f, qs = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        kv = __builtin_fmaf(tok.k[i], S[i * dv + j], kv);
        qs = __builtin_fmaf(tok.q[i], S[i * dv + j], qs);
      }
      finish_column(kv, qs, j, kq[static_cast<size_t>(t)], tok);
      for (int64_t i = 0; i < dk; ++i) S[i * dv + j] = __builtin_fmaf(S[i * dv + j], tok.decay, tok.k[i] * tok.delta[j]);
    }
  }
}

#endif

#if ZEN_HAVE_NEON

float dot_neon(const float* a, const float* b, int64_t n) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
  float sum = vaddvq_f32(acc);
  for (; i < n; ++i) sum = __builtin_fmaf(a[i], b[i], sum);
  return sum;
}

// finish_column for 4 columns.
inline void finish_columns_neon(float32x4_t kv, float32x4_t qs, int64_t j, float kq, const DeltaRuleToken& t) {
  const float32x4_t d = vmulq_n_f32(vfmsq_n_f32(vld1q_f32(t.v + j), kv, t.decay), t.beta);
  vst1q_f32(t.delta + j, d);
  vst1q_f32(t.out + j, vfmaq_n_f32(vmulq_n_f32(qs, t.decay), d, kq));
}

// Gather for columns [j, j + 4 kVecs): S^T k and S^T q in 2 kVecs accumulators, rows in order.
template <int kVecs>
void gather_block_neon(const float* S, int64_t dv, int64_t dk, int64_t j, float kq, const DeltaRuleToken& t) {
  float32x4_t kv[kVecs], qs[kVecs];
  for (int c = 0; c < kVecs; ++c) kv[c] = qs[c] = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    const float* row = S + i * dv + j;
    for (int c = 0; c < kVecs; ++c) {
      const float32x4_t s = vld1q_f32(row + 4 * c);
      kv[c] = vfmaq_n_f32(kv[c], s, t.k[i]);
      qs[c] = vfmaq_n_f32(qs[c], s, t.q[i]);
    }
  }
  for (int c = 0; c < kVecs; ++c) finish_columns_neon(kv[c], qs[c], j + 4 * c, kq, t);
}

void gather_neon(const float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
  const float kq = dot_neon(t.k, t.q, dk);
  int64_t j = 0;
  for (; j + 16 <= dv; j += 16) gather_block_neon<4>(S, dv, dk, j, kq, t);
  for (; j + 4 <= dv; j += 4) gather_block_neon<1>(S, dv, dk, j, kq, t);
  for (; j < dv; ++j) gather_column(S, dk, dv, j, kq, t);
}

void update_neon(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
  for (int64_t i = 0; i < dk; ++i) {
    float* row = S + i * dv;
    int64_t c = 0;
    for (; c + 4 <= dv; c += 4)
      vst1q_f32(row + c, vfmaq_n_f32(vmulq_n_f32(vld1q_f32(t.delta + c), t.k[i]), vld1q_f32(row + c), t.decay));
    for (; c < dv; ++c) row[c] = __builtin_fmaf(row[c], t.decay, t.k[i] * t.delta[c]);
  }
}

#endif

}  // namespace

void delta_rule_gather_f32(const float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return gather_avx2(S, dk, dv, t);
#elif ZEN_HAVE_NEON
  if (use_neon()) return gather_neon(S, dk, dv, t);
#endif
  ref::delta_rule_gather_f32(S, dk, dv, t);
}

void delta_rule_update_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return update_avx2(S, dk, dv, t);
#elif ZEN_HAVE_NEON
  if (use_neon()) return update_neon(S, dk, dv, t);
#endif
  ref::delta_rule_update_f32(S, dk, dv, t);
}

void delta_rule_update_gather_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& prev,
                                  const DeltaRuleToken& next) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return update_gather_avx2(S, dk, dv, prev, next);
#endif
  delta_rule_update_f32(S, dk, dv, prev);
  delta_rule_gather_f32(S, dk, dv, next);
}

void delta_rule_step_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
  delta_rule_gather_f32(S, dk, dv, t);
  delta_rule_update_f32(S, dk, dv, t);
}

void delta_rule_run_f32(float* S, int64_t dk, int64_t dv, int64_t n, const DeltaRuleToken* tokens) {
  if (n <= 0) return;
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return run_avx2(S, dk, dv, n, tokens);
#endif
  for (int64_t t = 0; t < n; ++t) delta_rule_step_f32(S, dk, dv, tokens[t]);  // NEON: two passes a token
}

}  // namespace zen::kernels
