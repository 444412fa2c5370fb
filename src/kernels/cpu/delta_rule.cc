#include "kernels/cpu/delta_rule.h"

#include "kernels/cpu/simd.h"

namespace zen::kernels {

namespace ref {

void delta_rule_step_f32(float* S, int64_t dk, int64_t dv, const float* q, const float* k, const float* v, float decay,
                         float beta, float* out, float* delta) {
  // Pass 1: delta holds S^T k, out holds S^T q.
  for (int64_t j = 0; j < dv; ++j) delta[j] = out[j] = 0.0f;
  float kq = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    const float* row = S + i * dv;
    for (int64_t j = 0; j < dv; ++j) {
      delta[j] += k[i] * row[j];
      out[j] += q[i] * row[j];
    }
    kq += k[i] * q[i];
  }
  for (int64_t j = 0; j < dv; ++j) {
    delta[j] = beta * (v[j] - decay * delta[j]);
    out[j] = kq * delta[j] + decay * out[j];
  }
  // Pass 2.
  for (int64_t i = 0; i < dk; ++i) {
    float* row = S + i * dv;
    for (int64_t j = 0; j < dv; ++j) row[j] = row[j] * decay + k[i] * delta[j];
  }
}

}  // namespace ref

namespace {

#if ZEN_HAVE_X86_SIMD

// Pass 1 for columns [j, j + 8 kVecs): S^T k and S^T q in 2 kVecs register accumulators
// (kVecs 4: eight independent FMA chains, enough to cover the FMA latency), then delta and
// out for those columns.
template <int kVecs>
ZEN_TARGET_AVX2 void pass1_block(const float* S, int64_t dk, int64_t dv, int64_t j, const float* q, const float* k,
                                 const float* v, float decay, float beta, float kq, float* out, float* delta) {
  __m256 kv[kVecs], qs[kVecs];
#pragma GCC unroll 4
  for (int c = 0; c < kVecs; ++c) kv[c] = qs[c] = _mm256_setzero_ps();
  const float* col = S + j;
  for (int64_t i = 0; i < dk; ++i) {
    const __m256 kb = _mm256_broadcast_ss(k + i), qb = _mm256_broadcast_ss(q + i);
    const float* row = col + i * dv;
#pragma GCC unroll 4
    for (int c = 0; c < kVecs; ++c) {
      const __m256 s = _mm256_loadu_ps(row + 8 * c);
      kv[c] = _mm256_fmadd_ps(kb, s, kv[c]);
      qs[c] = _mm256_fmadd_ps(qb, s, qs[c]);
    }
  }
  const __m256 vdecay = _mm256_set1_ps(decay), vbeta = _mm256_set1_ps(beta), vkq = _mm256_set1_ps(kq);
#pragma GCC unroll 4
  for (int c = 0; c < kVecs; ++c) {
    const int64_t at = j + 8 * c;
    const __m256 d = _mm256_mul_ps(vbeta, _mm256_fnmadd_ps(vdecay, kv[c], _mm256_loadu_ps(v + at)));
    _mm256_storeu_ps(delta + at, d);
    _mm256_storeu_ps(out + at, _mm256_fmadd_ps(vkq, d, _mm256_mul_ps(vdecay, qs[c])));
  }
}

ZEN_TARGET_AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float sum = hsum(acc);
  for (; i < n; ++i) sum = __builtin_fmaf(a[i], b[i], sum);
  return sum;
}

ZEN_TARGET_AVX2 void delta_rule_step_avx2(float* S, int64_t dk, int64_t dv, const float* q, const float* k,
                                          const float* v, float decay, float beta, float* out, float* delta) {
  const float kq = dot_avx2(k, q, dk);
  // Pass 1 by column blocks of 32, then 8, then single columns (the same FMA sequence per
  // column in each).
  int64_t j = 0;
  for (; j + 32 <= dv; j += 32) pass1_block<4>(S, dk, dv, j, q, k, v, decay, beta, kq, out, delta);
  for (; j + 8 <= dv; j += 8) pass1_block<1>(S, dk, dv, j, q, k, v, decay, beta, kq, out, delta);
  for (; j < dv; ++j) {
    float kv = 0.0f, qs = 0.0f;
    for (int64_t i = 0; i < dk; ++i) {
      kv = __builtin_fmaf(k[i], S[i * dv + j], kv);
      qs = __builtin_fmaf(q[i], S[i * dv + j], qs);
    }
    delta[j] = beta * __builtin_fmaf(-decay, kv, v[j]);
    out[j] = __builtin_fmaf(kq, delta[j], decay * qs);
  }
  // Pass 2, last row first: pass 1 ended on the last rows, so they are the ones still in L1
  // when the state is larger than L1 (128 x 128: 64 KB, half of it stays).
  const __m256 vdecay = _mm256_set1_ps(decay);
  for (int64_t i = dk - 1; i >= 0; --i) {
    float* row = S + i * dv;
    const __m256 kb = _mm256_broadcast_ss(k + i);
    int64_t c = 0;
#pragma GCC unroll 4
    for (; c + 8 <= dv; c += 8)
      _mm256_storeu_ps(row + c, _mm256_fmadd_ps(_mm256_loadu_ps(row + c), vdecay,
                                                _mm256_mul_ps(kb, _mm256_loadu_ps(delta + c))));
    for (; c < dv; ++c) row[c] = __builtin_fmaf(row[c], decay, k[i] * delta[c]);
  }
}

#endif

}  // namespace

void delta_rule_step_f32(float* S, int64_t dk, int64_t dv, const float* q, const float* k, const float* v, float decay,
                         float beta, float* out, float* delta) {
#if ZEN_HAVE_X86_SIMD
  if (use_avx2()) return delta_rule_step_avx2(S, dk, dv, q, k, v, decay, beta, out, delta);
#endif
  ref::delta_rule_step_f32(S, dk, dv, q, k, v, decay, beta, out, delta);
}

}  // namespace zen::kernels
