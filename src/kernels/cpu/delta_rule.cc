#include "kernels/cpu/delta_rule.h"

#include "kernels/cpu/simd.h"

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
template <int kVecs>
ZEN_TARGET_AVX2 void finish_columns(const __m256* kv, const __m256* qs, int64_t j, float kq, const DeltaRuleToken& t) {
  const __m256 vdecay = _mm256_set1_ps(t.decay), vbeta = _mm256_set1_ps(t.beta), vkq = _mm256_set1_ps(kq);
#pragma GCC unroll 4
  for (int c = 0; c < kVecs; ++c) {
    const int64_t at = j + 8 * c;
    const __m256 d = _mm256_mul_ps(vbeta, _mm256_fnmadd_ps(vdecay, kv[c], _mm256_loadu_ps(t.v + at)));
    _mm256_storeu_ps(t.delta + at, d);
    _mm256_storeu_ps(t.out + at, _mm256_fmadd_ps(vkq, d, _mm256_mul_ps(vdecay, qs[c])));
  }
}

// The same for one column past the vector blocks, with the same operations.
ZEN_TARGET_AVX2 void finish_column(float kv, float qs, int64_t j, float kq, const DeltaRuleToken& t) {
  t.delta[j] = t.beta * __builtin_fmaf(-t.decay, kv, t.v[j]);
  t.out[j] = __builtin_fmaf(kq, t.delta[j], t.decay * qs);
}

// Gather for columns [j, j + 8 kVecs): S^T k and S^T q in 2 kVecs register accumulators
// (kVecs 4: eight independent FMA chains, enough to cover the FMA latency).
template <int kVecs>
ZEN_TARGET_AVX2 void gather_block(const float* S, int64_t dk, int64_t dv, int64_t j, float kq, const DeltaRuleToken& t) {
  __m256 kv[kVecs], qs[kVecs];
#pragma GCC unroll 4
  for (int c = 0; c < kVecs; ++c) kv[c] = qs[c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < dk; ++i) {
    const __m256 kb = _mm256_broadcast_ss(t.k + i), qb = _mm256_broadcast_ss(t.q + i);
    const float* row = S + i * dv + j;
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
ZEN_TARGET_AVX2 void update_gather_block(float* S, int64_t dk, int64_t dv, int64_t j, const DeltaRuleToken& prev,
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
    float* row = S + i * dv + j;
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
  for (; j + 32 <= dv; j += 32) gather_block<4>(S, dk, dv, j, kq, t);
  for (; j + 8 <= dv; j += 8) gather_block<1>(S, dk, dv, j, kq, t);
  for (; j < dv; ++j) {
    float kv = 0.0f, qs = 0.0f;
    for (int64_t i = 0; i < dk; ++i) {
      kv = __builtin_fmaf(t.k[i], S[i * dv + j], kv);
      qs = __builtin_fmaf(t.q[i], S[i * dv + j], qs);
    }
    finish_column(kv, qs, j, kq, t);
  }
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
      update_gather_block<3>(S, dk, dv, j, prev, kq, next);
      j += 24;
    } else if (vecs >= 2) {
      update_gather_block<2>(S, dk, dv, j, prev, kq, next);
      j += 16;
    } else {
      update_gather_block<1>(S, dk, dv, j, prev, kq, next);
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

#endif

}  // namespace

void delta_rule_gather_f32(const float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return gather_avx2(S, dk, dv, t);
#endif
  ref::delta_rule_gather_f32(S, dk, dv, t);
}

void delta_rule_update_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return update_avx2(S, dk, dv, t);
#endif
  ref::delta_rule_update_f32(S, dk, dv, t);
}

void delta_rule_update_gather_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& prev,
                                  const DeltaRuleToken& next) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return update_gather_avx2(S, dk, dv, prev, next);
#endif
  ref::delta_rule_update_f32(S, dk, dv, prev);
  ref::delta_rule_gather_f32(S, dk, dv, next);
}

void delta_rule_step_f32(float* S, int64_t dk, int64_t dv, const DeltaRuleToken& t) {
  delta_rule_gather_f32(S, dk, dv, t);
  delta_rule_update_f32(S, dk, dv, t);
}

}  // namespace zen::kernels
