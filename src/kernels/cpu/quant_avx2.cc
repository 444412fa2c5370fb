// AVX2+FMA+F16C kernels for the block formats. Every function carries ZEN_TARGET_AVX2, so
// nothing here runs unless quant.cc's dispatch saw the CPU support it.
//
// Integer core: weights and activation quants are multiplied with maddubs (u8 x s8 -> pairs
// of s16), widened with madd (-> s32), scaled per sub-block in integers where the format has
// integer sub-scales, and converted to float once per block: acc += d_w * d_a * sum.
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/quant_avx2.h"
#include "kernels/cpu/quant_blocks.h"

namespace zen::kernels::avx2 {
namespace {

ZEN_TARGET_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

ZEN_TARGET_AVX2 inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

ZEN_TARGET_AVX2 inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// 32 signed bytes times 32 signed bytes, summed in groups of 4 -> 8 x s32. Valid while the
// second operand has no -128 (our activation quants are within [-127, 127]).
ZEN_TARGET_AVX2 inline __m256i dot_s8_s8(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

// Unsigned bytes (<= 63) times signed bytes, summed in groups of 4 -> 8 x s32.
ZEN_TARGET_AVX2 inline __m256i dot_u8_s8(__m256i x, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

// 16 bytes of nibbles -> 32 bytes: lanes 0..15 the low nibbles, 16..31 the high nibbles.
ZEN_TARGET_AVX2 inline __m256i nibbles_32(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set.
ZEN_TARGET_AVX2 inline __m256i bits_to_bytes(const uint8_t* p) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(load_u32(p)));
  // Byte i takes the source byte i/8 ...
  const __m256i spread = _mm256_shuffle_epi8(
      v, _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  // ... and tests bit i%8 of it.
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

ZEN_TARGET_AVX2 inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Quantizes 32 floats as ggml's x86 quantize_row_q8_0 does; returns d, writes the quants and
// the 8 partial s32 sums (for Q8_1's s).
ZEN_TARGET_AVX2 inline float quantize_block_q8(const float* x, int8_t* qs, __m256i* sums) {
  __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
  amax = _mm256_max_ps(amax, _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float max_abs = _mm_cvtss_f32(m4);
  const float d = max_abs / 127.f;
  const __m256 id = _mm256_set1_ps(max_abs != 0.0f ? 127.f / max_abs : 0.0f);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), kRound));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), kRound));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), kRound));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), kRound));
  *sums = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
  // Packs work per 128-bit lane; the permute restores element order.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  const __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), ordered);
  return d;
}

}  // namespace

ZEN_TARGET_AVX2 void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    __m256i sums;
    y[i].d = f32_to_f16(quantize_block_q8(x + kQK * i, y[i].qs, &sums));
  }
}

ZEN_TARGET_AVX2 void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    __m256i sums;
    const float d = quantize_block_q8(x + kQK * i, y[i].qs, &sums);
    y[i].d = f32_to_f16(d);
    y[i].s = f32_to_f16(d * static_cast<float>(hsum_i32(sums)));
  }
}

ZEN_TARGET_AVX2 void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    __m256 amax_v = _mm256_setzero_ps();
    for (int j = 0; j < kQKK; j += 8)
      amax_v = _mm256_max_ps(amax_v, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax_v, 1), _mm256_castps256_ps128(amax_v));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The scale's sign comes from the first element of largest magnitude (as ggml's scan).
    float max = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      if (x[j] == amax || x[j] == -amax) {
        max = x[j];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 mul = _mm256_set1_ps(iscale);
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for (int j = 0; j < kQKK; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k)
        q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), mul), kRound));
      y[i].bsums[j / 16] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[j / 16 + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[2], q[3])));
      const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), ordered);
    }
    y[i].d = 1.0f / iscale;
  }
}

// --- 32-element formats against Q8_0 / Q8_1 -------------------------------------------------
// Two accumulators (even / odd blocks) hide the FMA latency.

ZEN_TARGET_AVX2 float dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i p = dot_s8_s8(load256(x[i].qs), load256(y[i].qs));
    const __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
    acc[i & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i & 1]);
  }
  return hsum(_mm256_add_ps(acc[0], acc[1]));
}

ZEN_TARGET_AVX2 float dot_q4_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const __m256i eight = _mm256_set1_epi8(8);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i q = _mm256_sub_epi8(nibbles_32(x[i].qs), eight);
    const __m256i p = dot_s8_s8(q, load256(y[i].qs));
    const __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
    acc[i & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i & 1]);
  }
  return hsum(_mm256_add_ps(acc[0], acc[1]));
}

ZEN_TARGET_AVX2 float dot_q5_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const __m256i high = _mm256_set1_epi8(static_cast<char>(0xF0));
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < nb; ++i) {
    // (q | h<<4) - 16 == q | 0xF0 (as int8) where h is 0, and q where h is 1.
    const __m256i minus16 = _mm256_andnot_si256(bits_to_bytes(x[i].qh), high);
    const __m256i q = _mm256_or_si256(nibbles_32(x[i].qs), minus16);
    const __m256i p = dot_s8_s8(q, load256(y[i].qs));
    const __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
    acc[i & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i & 1]);
  }
  return hsum(_mm256_add_ps(acc[0], acc[1]));
}

ZEN_TARGET_AVX2 float dot_q4_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  const int64_t nb = n / kQK;
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  float mins = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i p = dot_u8_s8(nibbles_32(x[i].qs), load256(y[i].qs));
    const __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
    acc[i & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i & 1]);
    mins += f16(x[i].m) * f16(y[i].s);
  }
  return hsum(_mm256_add_ps(acc[0], acc[1])) + mins;
}

ZEN_TARGET_AVX2 float dot_q5_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  const int64_t nb = n / kQK;
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  float mins = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i q = _mm256_or_si256(nibbles_32(x[i].qs), _mm256_and_si256(bits_to_bytes(x[i].qh), bit4));
    const __m256i p = dot_u8_s8(q, load256(y[i].qs));
    const __m256 d = _mm256_set1_ps(f16(x[i].d) * f16(y[i].d));
    acc[i & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i & 1]);
    mins += f16(x[i].m) * f16(y[i].s);
  }
  return hsum(_mm256_add_ps(acc[0], acc[1])) + mins;
}

// --- k-quants against Q8_K ------------------------------------------------------------------
namespace {

// Q4_K/Q5_K packed 6-bit scales -> sc[0..7] in bytes 0..7 and m[0..7] in bytes 8..15.
ZEN_TARGET_AVX2 inline __m128i k4_scales_mins(const uint8_t* packed) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);  // m[4..7]
  const uint32_t m_lo = u[1] & kLow6;                              // m[0..3]
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);            // sc[4..7]
  u[2] = m_lo;
  u[0] &= kLow6;  // sc[0..3]
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
}

// Shuffle masks broadcasting s16 lane s (bytes 2s, 2s+1) to all 16 lanes of a 128-bit half.
alignas(32) constexpr uint8_t kBroadcastLane16[8][32] = {
#define ZEN_LANE(s) {2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, \
                     2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, \
                     2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1}
    ZEN_LANE(0), ZEN_LANE(1), ZEN_LANE(2), ZEN_LANE(3),
    ZEN_LANE(4), ZEN_LANE(5), ZEN_LANE(6), ZEN_LANE(7),
#undef ZEN_LANE
};

// Low half: s16 lane 2g; high half: lane 2g+1 (Q6_K: two 16-element sub-blocks per 32).
alignas(32) constexpr uint8_t kPairLanes16[4][32] = {
#define ZEN_PAIR(g) {4*g, 4*g+1, 4*g, 4*g+1, 4*g, 4*g+1, 4*g, 4*g+1, 4*g, 4*g+1, 4*g, 4*g+1, \
                     4*g, 4*g+1, 4*g, 4*g+1, 4*g+2, 4*g+3, 4*g+2, 4*g+3, 4*g+2, 4*g+3, 4*g+2, 4*g+3, \
                     4*g+2, 4*g+3, 4*g+2, 4*g+3, 4*g+2, 4*g+3, 4*g+2, 4*g+3}
    ZEN_PAIR(0), ZEN_PAIR(1), ZEN_PAIR(2), ZEN_PAIR(3),
#undef ZEN_PAIR
};

ZEN_TARGET_AVX2 inline __m256i mask(const uint8_t* m) { return load256(m); }

// Sum over the 8 sub-blocks of min[s] * (bsums[2s] + bsums[2s+1]).
ZEN_TARGET_AVX2 inline int k4_min_sum(__m128i scales_mins, const int16_t* bsums) {
  const __m256i b = load256(bsums);
  const __m128i pair_sums = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(scales_mins, scales_mins));
  __m128i s = _mm_madd_epi16(mins, pair_sums);
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// One Q4_K/Q5_K super-block's scaled integer sum given its 4-or-5-bit quants per chunk.
// `high_bits` is null for Q4_K.
ZEN_TARGET_AVX2 inline __m256i k4_block_sum(const uint8_t* qs, const uint8_t* high_bits, __m128i scales_mins,
                                           const int8_t* yq) {
  const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scales_mins));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i hbits = high_bits != nullptr ? load256(high_bits) : _mm256_setzero_si256();
  __m256i sum = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i bits = load256(qs + 32 * c);
    __m256i lo = _mm256_and_si256(bits, low4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4);
    if (high_bits != nullptr) {
      // Bit 2c -> bit 4 of the low half's bytes, bit 2c+1 -> bit 4 of the high half's.
      const __m256i b_lo = _mm256_and_si256(hbits, _mm256_set1_epi8(static_cast<char>(1 << (2 * c))));
      const __m256i b_hi = _mm256_and_si256(hbits, _mm256_set1_epi8(static_cast<char>(2 << (2 * c))));
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_srli_epi16(b_lo, 2 * c), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_srli_epi16(b_hi, 2 * c + 1), 4));
    }
    const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(yq + 64 * c));
    const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(yq + 64 * c + 32));
    const __m256i sc_lo = _mm256_shuffle_epi8(scales16, mask(kBroadcastLane16[2 * c]));
    const __m256i sc_hi = _mm256_shuffle_epi8(scales16, mask(kBroadcastLane16[2 * c + 1]));
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p_lo, sc_lo));
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p_hi, sc_hi));
  }
  return sum;
}

}  // namespace

ZEN_TARGET_AVX2 float dot_q4_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i sm = k4_scales_mins(x[i].scales);
    const __m256i sum = k4_block_sum(x[i].qs, nullptr, sm, y[i].qs);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sum), acc);
    mins += f16(x[i].dmin) * y[i].d * static_cast<float>(k4_min_sum(sm, y[i].bsums));
  }
  return hsum(acc) - mins;
}

ZEN_TARGET_AVX2 float dot_q5_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i sm = k4_scales_mins(x[i].scales);
    const __m256i sum = k4_block_sum(x[i].qs, x[i].qh, sm, y[i].qs);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sum), acc);
    mins += f16(x[i].dmin) * y[i].d * static_cast<float>(k4_min_sum(sm, y[i].bsums));
  }
  return hsum(acc) - mins;
}

ZEN_TARGET_AVX2 float dot_q6_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    // 16 sub-block scales as s16: lanes 0..7 in the low half, 8..15 in the high half.
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i sc = _mm256_permute2x128_si256(scales16, scales16, h == 0 ? 0x00 : 0x11);
      const __m256i ql0 = load256(x[i].ql + 64 * h);
      const __m256i ql1 = load256(x[i].ql + 64 * h + 32);
      const __m256i qh = load256(x[i].qh + 32 * h);
      // Unsigned 6-bit quants (0..63) of the four 32-element groups of this half.
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4),
                             _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4),
                             _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0C)), 2));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                             _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                             _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(0xC0))), 2));
      const int8_t* yq = y[i].qs + 128 * h;
      for (int g = 0; g < 4; ++g) {
        const __m256i p = _mm256_maddubs_epi16(q[g], load256(yq + 32 * g));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, _mm256_shuffle_epi8(sc, mask(kPairLanes16[g]))));
      }
    }
    // The quants were taken as q instead of q - 32: subtract 32 * sum_s scale[s] * bsums[s].
    const __m256i bias = _mm256_madd_epi16(scales16, load256(y[i].bsums));
    sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(bias, 5));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sum), acc);
  }
  return hsum(acc);
}

// --- plain formats against f32 ----------------------------------------------------------------
namespace {

ZEN_TARGET_AVX2 inline __m256 load_f32(const float* p) { return _mm256_loadu_ps(p); }
ZEN_TARGET_AVX2 inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
ZEN_TARGET_AVX2 inline __m256 load_bf16(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// Four accumulators over 32 elements per step, then 8 at a time, then a scalar tail.
template <typename T, __m256 (*Load)(const T*), float (*Widen)(T)>
ZEN_TARGET_AVX2 inline float dot_plain(const T* w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    a0 = _mm256_fmadd_ps(Load(w + j), _mm256_loadu_ps(x + j), a0);
    a1 = _mm256_fmadd_ps(Load(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
    a2 = _mm256_fmadd_ps(Load(w + j + 16), _mm256_loadu_ps(x + j + 16), a2);
    a3 = _mm256_fmadd_ps(Load(w + j + 24), _mm256_loadu_ps(x + j + 24), a3);
  }
  for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(Load(w + j), _mm256_loadu_ps(x + j), a0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; j < n; ++j) sum += Widen(w[j]) * x[j];
  return sum;
}

inline float widen_f32(float v) { return v; }
inline float widen_f16(uint16_t v) { return f16_to_f32(v); }
inline float widen_bf16(uint16_t v) { return bf16_to_f32(v); }

}  // namespace

ZEN_TARGET_AVX2 float dot_f32(const void* w, const void* act, int64_t n) {
  return dot_plain<float, load_f32, widen_f32>(static_cast<const float*>(w), static_cast<const float*>(act), n);
}
ZEN_TARGET_AVX2 float dot_f16(const void* w, const void* act, int64_t n) {
  return dot_plain<uint16_t, load_f16, widen_f16>(static_cast<const uint16_t*>(w), static_cast<const float*>(act), n);
}
ZEN_TARGET_AVX2 float dot_bf16(const void* w, const void* act, int64_t n) {
  return dot_plain<uint16_t, load_bf16, widen_bf16>(static_cast<const uint16_t*>(w), static_cast<const float*>(act),
                                                    n);
}

}  // namespace zen::kernels::avx2

#endif  // ZEN_HAVE_X86_SIMD
