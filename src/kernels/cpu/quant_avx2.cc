// AVX2+FMA+F16C kernels for the block formats. Every function carries ZEN_TARGET_AVX2, so
// nothing here runs unless quant.cc's dispatch saw the CPU support it.
//
// Integer core: weights and activation quants are multiplied with maddubs (u8 x s8 -> pairs
// of s16), widened with madd (-> s32), scaled per sub-block in integers where the format has
// integer sub-scales, and converted to float once per block: acc += d_w * d_a * sum.
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_avx2.h"
#include "kernels/cpu/quant_blocks.h"

namespace zen::kernels::avx2 {
namespace {

ZEN_TARGET_AVX2 inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

ZEN_TARGET_AVX2 inline float f16(uint16_t h) { return _cvtsh_ss(h); }
// An f16 value widened and broadcast to 8 lanes (2 uops: broadcast, convert).
ZEN_TARGET_AVX2 inline __m256 splat_f16(uint16_t h) {
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h)));
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

// --- dot-product tiles ---------------------------------------------------------------------
// A tile computes y[r, t] = dot(weight row r, activation row t) for R rows x T tokens,
// unpacking each weight block once for all T tokens and loading each activation block once
// for all R rows. Every (r, t) pair gets its own accumulators and exactly the same sequence
// of operations whatever R and T are, so results do not depend on the tile shape (and thus
// not on batch size or thread split): integer sums per block are exact, and each block adds
// one fixed set of FMAs to the pair's f32 accumulator.
namespace {

template <typename Block>
ZEN_TARGET_AVX2 inline const Block& block_at(const uint8_t* row, int64_t i) {
  return reinterpret_cast<const Block*>(row)[i];
}

// Decode streams each weight row once from DRAM, through 4 KB pages that the hardware
// prefetcher does not cross and in rows (1-4 KB) too short for it to ramp up. So decode tiles
// prefetch kPrefetchAhead bytes ahead of where each of their rows reads; rows are adjacent, so
// this runs ahead into the rows of the next tiles. (Prefetches never fault: reaching past the
// end of the tensor is harmless.) Measured on the dev machine: Q8_0/Q4_K/Q6_K GEMV from DRAM
// 1.5-2.5x faster than without; the distance matters little between 4 and 16 KB.
constexpr size_t kPrefetchAhead = 8192;

template <int R>
ZEN_TARGET_AVX2 inline void prefetch_ahead(const uint8_t* w, size_t ws, size_t offset, size_t bytes) {
  const uint8_t* p = w + offset + kPrefetchAhead;
  for (int r = 0; r < R; ++r, p += ws)
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

// Adds a * b to lane 0 of acc (a broadcast, b in lane 0 of b0), leaving the other lanes as
// they are.
ZEN_TARGET_AVX2 inline __m256 add_lane0_product(__m256 acc, __m256 a, __m256 b0) {
  return _mm256_fmadd_ps(a, b0, acc);
}

// Signed quants of the symmetric 32-element formats (value = d * q).
struct Q8_0Quants {
  using Block = BlockQ8_0;
  ZEN_TARGET_AVX2 static __m256i quants(const Block& b) { return load256(b.qs); }
};
struct Q4_0Quants {
  using Block = BlockQ4_0;
  ZEN_TARGET_AVX2 static __m256i quants(const Block& b) {
    return _mm256_sub_epi8(nibbles_32(b.qs), _mm256_set1_epi8(8));
  }
};
struct Q5_0Quants {
  using Block = BlockQ5_0;
  // (q | h<<4) - 16 == q | 0xF0 (as int8) where h is 0, and q where h is 1.
  ZEN_TARGET_AVX2 static __m256i quants(const Block& b) {
    const __m256i minus16 = _mm256_andnot_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(static_cast<char>(0xF0)));
    return _mm256_or_si256(nibbles_32(b.qs), minus16);
  }
};
// Unsigned quants of the offset formats (value = d * q + m).
struct Q4_1Quants {
  using Block = BlockQ4_1;
  ZEN_TARGET_AVX2 static __m256i quants(const Block& b) { return nibbles_32(b.qs); }
};
struct Q5_1Quants {
  using Block = BlockQ5_1;
  ZEN_TARGET_AVX2 static __m256i quants(const Block& b) {
    return _mm256_or_si256(nibbles_32(b.qs), _mm256_and_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(0x10)));
  }
};

template <typename W, int R, int T>
ZEN_TARGET_AVX2 void tile_symmetric(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t k, float* y,
                                    ptrdiff_t yr, ptrdiff_t yt) {
  __m256 acc[R][T];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k / kQK; ++i) {
    if constexpr (T == 1) prefetch_ahead<R>(w, ws, i * sizeof(typename W::Block), sizeof(typename W::Block));
    __m256i wq[R], wabs[R];
    __m256 wd[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const auto& b = block_at<typename W::Block>(w + r * ws, i);
      wq[r] = W::quants(b);
      wabs[r] = _mm256_sign_epi8(wq[r], wq[r]);
      wd[r] = splat_f16(b.d);
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const auto& ab = block_at<BlockQ8_0>(a + t * as, i);
      const __m256i aq = load256(ab.qs);
      const __m256 ad = splat_f16(ab.d);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        // |w| * (a with w's sign): u8 x s8 for maddubs.
        const __m256i p16 = _mm256_maddubs_epi16(wabs[r], _mm256_sign_epi8(aq, wq[r]));
        const __m256i p = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(wd[r], ad), _mm256_cvtepi32_ps(p), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) y[r * yr + t * yt] = hsum(acc[r][t]);
}

template <typename W, int R, int T>
ZEN_TARGET_AVX2 void tile_offset(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t k, float* y,
                                 ptrdiff_t yr, ptrdiff_t yt) {
  __m256 acc[R][T];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k / kQK; ++i) {
    if constexpr (T == 1) prefetch_ahead<R>(w, ws, i * sizeof(typename W::Block), sizeof(typename W::Block));
    __m256i wq[R];
    __m256 wd[R], wm[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const auto& b = block_at<typename W::Block>(w + r * ws, i);
      wq[r] = W::quants(b);
      wd[r] = splat_f16(b.d);
      wm[r] = splat_f16(b.m);
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const auto& ab = block_at<BlockQ8_1>(a + t * as, i);
      const __m256i aq = load256(ab.qs);
      const __m256 ad = splat_f16(ab.d);
      const __m256 asum0 = _mm256_zextps128_ps256(_mm_set_ss(f16(ab.s)));  // s in lane 0
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], aq), _mm256_set1_epi16(1));
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(wd[r], ad), _mm256_cvtepi32_ps(p), acc[r][t]);
        acc[r][t] = add_lane0_product(acc[r][t], wm[r], asum0);  // block minimum: m * d_a * sum(q_a)
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) y[r * yr + t * yt] = hsum(acc[r][t]);
}

// --- k-quants: per super-block state of one weight row, and its 32-element groups ----------

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

// Shuffle masks broadcasting s16 lane s (bytes 2s, 2s+1) to every lane of both halves.
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

// Q4_K and Q5_K (kHighBit): quants 0..15 / 0..31, value = d*sc[j]*q - dmin*m[j] per group j.
template <bool kHighBit>
struct K4Quants {
  using Block = std::conditional_t<kHighBit, BlockQ5_K, BlockQ4_K>;
  struct Prep {
    const Block* b;
    __m128i scales_mins;  // sc[0..7], m[0..7] as bytes
    __m256i scales16;     // sc[0..7] as s16 in both halves
    float d, dmin;
  };
  ZEN_TARGET_AVX2 static Prep prepare(const Block& b) {
    Prep p;
    p.b = &b;
    p.scales_mins = k4_scales_mins(b.scales);
    p.scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(p.scales_mins));
    p.d = f16(b.d);
    p.dmin = f16(b.dmin);
    return p;
  }
  // Group j: elements 32j..32j+31 = low (j even) or high (j odd) nibbles of qs[32*(j/2)..].
  ZEN_TARGET_AVX2 static __m256i group(const Prep& p, int j) {
    const __m256i bits = load256(p.b->qs + 32 * (j / 2));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256i q = (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4) : _mm256_and_si256(bits, low4);
    if constexpr (kHighBit) {
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(load256(p.b->qh), bit), bit);
      q = _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
    }
    return q;
  }
  ZEN_TARGET_AVX2 static __m256i group_scales(const Prep& p, int j) {
    return _mm256_shuffle_epi8(p.scales16, load256(kBroadcastLane16[j]));
  }
  // acc += d*d_a*sum - dmin*d_a*sum_j(m[j] * sum of the activation quants of group j).
  ZEN_TARGET_AVX2 static __m256 finish(const Prep& p, const BlockQ8_K& ab, __m256i sum, __m256 acc) {
    acc = _mm256_fmadd_ps(_mm256_set1_ps(p.d * ab.d), _mm256_cvtepi32_ps(sum), acc);
    const __m256i bs = load256(ab.bsums);
    const __m128i pair_sums = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(p.scales_mins, p.scales_mins));
    const __m128i msum = _mm_madd_epi16(mins, pair_sums);  // 4 x s32
    return _mm256_fmadd_ps(_mm256_set1_ps(-(p.dmin * ab.d)), _mm256_cvtepi32_ps(_mm256_zextsi128_si256(msum)), acc);
  }
};

// Q6_K: quants 0..63 taken unsigned; the -32 offset comes back through the bsums.
struct Q6KQuants {
  using Block = BlockQ6_K;
  struct Prep {
    const Block* b;
    __m256i scales16;    // all 16 sub-block scales as s16 (0..7 low half, 8..15 high half)
    __m256i half_sc[2];  // scales 8h..8h+7 in both halves
    float d;
  };
  ZEN_TARGET_AVX2 static Prep prepare(const Block& b) {
    Prep p;
    p.b = &b;
    p.scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    p.half_sc[0] = _mm256_permute2x128_si256(p.scales16, p.scales16, 0x00);
    p.half_sc[1] = _mm256_permute2x128_si256(p.scales16, p.scales16, 0x11);
    p.d = f16(b.d);
    return p;
  }
  // Group j = 4h + g: elements 128h + 32g + l (l < 32).
  ZEN_TARGET_AVX2 static __m256i group(const Prep& p, int j) {
    const int h = j / 4, g = j % 4;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i ql = load256(p.b->ql + 64 * h + 32 * (g & 1));
    const __m256i qh = load256(p.b->qh + 32 * h);
    const __m256i lo = (g < 2) ? _mm256_and_si256(ql, low4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), low4);
    __m256i hi;  // bits 2g, 2g+1 of qh -> bits 4, 5
    switch (g) {
      case 0: hi = _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4); break;
      case 1: hi = _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0C)), 2); break;
      case 2: hi = _mm256_and_si256(qh, _mm256_set1_epi8(0x30)); break;
      default: hi = _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(0xC0))), 2); break;
    }
    return _mm256_or_si256(lo, hi);
  }
  ZEN_TARGET_AVX2 static __m256i group_scales(const Prep& p, int j) {
    return _mm256_shuffle_epi8(p.half_sc[j / 4], load256(kPairLanes16[j % 4]));
  }
  ZEN_TARGET_AVX2 static __m256 finish(const Prep& p, const BlockQ8_K& ab, __m256i sum, __m256 acc) {
    // The quants were taken as q instead of q - 32: subtract 32 * sum_s scale[s] * bsums[s].
    const __m256i bias = _mm256_madd_epi16(p.scales16, load256(ab.bsums));
    sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(bias, 5));
    return _mm256_fmadd_ps(_mm256_set1_ps(p.d * ab.d), _mm256_cvtepi32_ps(sum), acc);
  }
};

template <typename W, int R, int T>
ZEN_TARGET_AVX2 void tile_kquant(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t k, float* y,
                                 ptrdiff_t yr, ptrdiff_t yt) {
  __m256 acc[R][T];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k / kQKK; ++i) {
    if constexpr (T == 1) prefetch_ahead<R>(w, ws, i * sizeof(typename W::Block), sizeof(typename W::Block));
    typename W::Prep prep[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) prep[r] = W::prepare(block_at<typename W::Block>(w + r * ws, i));
    __m256i sum[R][T];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) sum[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __m256i wq[R], sc[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        wq[r] = W::group(prep[r], j);
        sc[r] = W::group_scales(prep[r], j);
      }
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const __m256i aq = load256(block_at<BlockQ8_K>(a + t * as, i).qs + 32 * j);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
          sum[r][t] = _mm256_add_epi32(sum[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], aq), sc[r]));
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t)
        acc[r][t] = W::finish(prep[r], block_at<BlockQ8_K>(a + t * as, i), sum[r][t], acc[r][t]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) y[r * yr + t * yt] = hsum(acc[r][t]);
}

// Tile families, so the tile templates can be passed as template arguments.
struct Symmetric {
  template <typename W, int R, int T>
  static constexpr DotTileFn fn = &tile_symmetric<W, R, T>;
};
struct Offset {
  template <typename W, int R, int T>
  static constexpr DotTileFn fn = &tile_offset<W, R, T>;
};
struct KQuant {
  template <typename W, int R, int T>
  static constexpr DotTileFn fn = &tile_kquant<W, R, T>;
};

// Rewrites rows of a symmetric format into Q8_0 blocks: the same int8 quants the tiles
// compute from W::quants and the same f16 scale, so Q8_0 tiles on the result do, per
// (row, token), exactly what W's tiles do on the stored rows.
template <typename W>
ZEN_TARGET_AVX2 void rows_to_q8_0(const uint8_t* w, size_t ws, int64_t rows, int64_t k, uint8_t* out) {
  auto* dst = reinterpret_cast<BlockQ8_0*>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k / kQK; ++i, ++dst) {
      const auto& b = block_at<typename W::Block>(w + static_cast<size_t>(r) * ws, i);
      dst->d = b.d;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->qs), W::quants(b));
    }
}

// Kernels of one format: kRows rows x 1 token for decode, 1 row x 1..4 tokens and a
// kBlockRows x kBlockTokens block for prefill.
template <typename Family, typename W, int kRows, int kBlockRows = 2, int kBlockTokens = 4>
DotKernels make_kernels() {
  DotKernels k;
  k.tile_rows = kRows;
  k.rows = Family::template fn<W, kRows, 1>;
  k.tokens[0] = Family::template fn<W, 1, 1>;
  k.tokens[1] = Family::template fn<W, 1, 2>;
  k.tokens[2] = Family::template fn<W, 1, 3>;
  k.tokens[3] = Family::template fn<W, 1, 4>;
  k.block_rows = kBlockRows;
  k.block_tokens = kBlockTokens;
  k.block = Family::template fn<W, kBlockRows, kBlockTokens>;
  return k;
}

// A symmetric format whose prefill goes through Q8_0 panels.
template <typename W, int kRows>
DotKernels make_panel_kernels() {
  DotKernels k = make_kernels<Symmetric, W, kRows>();
  k.to_panel = &rows_to_q8_0<W>;
  k.panel_dtype = DType::Q8_0;
  return k;
}

template <typename Family, typename W>
ZEN_TARGET_AVX2 float dot_one(const void* w, const void* act, int64_t n) {
  float y;
  Family::template fn<W, 1, 1>(static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(act), 0, n, &y, 0, 0);
  return y;
}

}  // namespace

ZEN_TARGET_AVX2 float dot_q8_0(const void* w, const void* act, int64_t n) { return dot_one<Symmetric, Q8_0Quants>(w, act, n); }
ZEN_TARGET_AVX2 float dot_q4_0(const void* w, const void* act, int64_t n) { return dot_one<Symmetric, Q4_0Quants>(w, act, n); }
ZEN_TARGET_AVX2 float dot_q5_0(const void* w, const void* act, int64_t n) { return dot_one<Symmetric, Q5_0Quants>(w, act, n); }
ZEN_TARGET_AVX2 float dot_q4_1(const void* w, const void* act, int64_t n) { return dot_one<Offset, Q4_1Quants>(w, act, n); }
ZEN_TARGET_AVX2 float dot_q5_1(const void* w, const void* act, int64_t n) { return dot_one<Offset, Q5_1Quants>(w, act, n); }
ZEN_TARGET_AVX2 float dot_q4_k(const void* w, const void* act, int64_t n) { return dot_one<KQuant, K4Quants<false>>(w, act, n); }
ZEN_TARGET_AVX2 float dot_q5_k(const void* w, const void* act, int64_t n) { return dot_one<KQuant, K4Quants<true>>(w, act, n); }
ZEN_TARGET_AVX2 float dot_q6_k(const void* w, const void* act, int64_t n) { return dot_one<KQuant, Q6KQuants>(w, act, n); }

// --- plain formats against f32 ----------------------------------------------------------------
namespace {

// Element types of the plain formats: how to load 8 as f32, and how to widen one.
struct F32Elem {
  using Elem = float;
  ZEN_TARGET_AVX2 static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static float widen(float v) { return v; }
};
struct F16Elem {
  using Elem = uint16_t;
  ZEN_TARGET_AVX2 static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float widen(uint16_t v) { return f16_to_f32(v); }
};
struct BF16Elem {
  using Elem = uint16_t;
  ZEN_TARGET_AVX2 static __m256 load(const uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static float widen(uint16_t v) { return bf16_to_f32(v); }
};

// Each (row, token) pair: two accumulators over alternate 8-element chunks (16 per step),
// one more chunk of 8 if left, then a scalar FMA tail; the same order in every tile shape.
template <typename E>
struct Plain {
  using Elem = typename E::Elem;
  template <int R, int T>
  ZEN_TARGET_AVX2 static void tile(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t k, float* y,
                                   ptrdiff_t yr, ptrdiff_t yt) {
    __m256 acc0[R][T], acc1[R][T];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) acc0[r][t] = acc1[r][t] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= k; j += 16) {
      if constexpr (T == 1) prefetch_ahead<R>(w, ws, j * sizeof(Elem), 16 * sizeof(Elem));
      __m256 w0[R], w1[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const Elem* row = reinterpret_cast<const Elem*>(w + r * ws);
        w0[r] = E::load(row + j);
        w1[r] = E::load(row + j + 8);
      }
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const float* x = reinterpret_cast<const float*>(a + t * as);
        const __m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + j + 8);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          acc0[r][t] = _mm256_fmadd_ps(w0[r], x0, acc0[r][t]);
          acc1[r][t] = _mm256_fmadd_ps(w1[r], x1, acc1[r][t]);
        }
      }
    }
    if (j + 8 <= k) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256 w0 = E::load(reinterpret_cast<const Elem*>(w + r * ws) + j);
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t)
          acc0[r][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(reinterpret_cast<const float*>(a + t * as) + j), acc0[r][t]);
      }
      j += 8;
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Elem* row = reinterpret_cast<const Elem*>(w + r * ws);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const float* x = reinterpret_cast<const float*>(a + t * as);
        __m128 sum = _mm_set_ss(hsum(_mm256_add_ps(acc0[r][t], acc1[r][t])));
        for (int64_t i = j; i < k; ++i) sum = _mm_fmadd_ss(_mm_set_ss(E::widen(row[i])), _mm_set_ss(x[i]), sum);
        y[r * yr + t * yt] = _mm_cvtss_f32(sum);
      }
    }
  }
};

using PlainF32 = Plain<F32Elem>;
using PlainF16 = Plain<F16Elem>;
using PlainBF16 = Plain<BF16Elem>;

struct PlainFamily {
  template <typename W, int R, int T>
  static constexpr DotTileFn fn = &W::template tile<R, T>;
};

}  // namespace

ZEN_TARGET_AVX2 float dot_f32(const void* w, const void* act, int64_t n) { return dot_one<PlainFamily, PlainF32>(w, act, n); }
ZEN_TARGET_AVX2 float dot_f16(const void* w, const void* act, int64_t n) { return dot_one<PlainFamily, PlainF16>(w, act, n); }
ZEN_TARGET_AVX2 float dot_bf16(const void* w, const void* act, int64_t n) { return dot_one<PlainFamily, PlainBF16>(w, act, n); }

// Decode tile heights, measured against ggml's vec_dot on the dev machine (Zen 3, 1 thread,
// weights from DRAM): formats light enough to stream at memory speed do best one row at a
// time (a single sequential stream); compute-bound ones (Q5_0, Q4_1, Q5_1) gain from sharing
// each activation block among 4 rows.
bool tiled_kernels(DType t, DotKernels* out) {
  switch (t) {
    // Q8_0 prefill (and the Q4_0/Q5_0 panels, which run Q8_0's tiles) in blocks of 4 rows x 4
    // tokens: fewest instructions per element of the shapes tried (callgrind).
    case DType::Q8_0: *out = make_kernels<Symmetric, Q8_0Quants, 1, 4, 4>(); break;
    case DType::Q4_0: *out = make_panel_kernels<Q4_0Quants, 2>(); break;
    case DType::Q5_0: *out = make_panel_kernels<Q5_0Quants, 4>(); break;
    case DType::Q4_1: *out = make_kernels<Offset, Q4_1Quants, 4>(); break;
    case DType::Q5_1: *out = make_kernels<Offset, Q5_1Quants, 4>(); break;
    // k-quant prefill blocks of 1 row x 8 tokens: fewer instructions than 2 x 4 (callgrind,
    // bench/gemm_instructions.py), whose int and float accumulators spill.
    case DType::Q4_K: *out = make_kernels<KQuant, K4Quants<false>, 1, 1, 8>(); break;
    case DType::Q5_K: *out = make_kernels<KQuant, K4Quants<true>, 2>(); break;
    case DType::Q6_K: *out = make_kernels<KQuant, Q6KQuants, 1, 1, 8>(); break;
    case DType::F32: *out = make_kernels<PlainFamily, PlainF32, 1>(); break;
    case DType::F16: *out = make_kernels<PlainFamily, PlainF16, 1>(); break;
    case DType::BF16: *out = make_kernels<PlainFamily, PlainBF16, 1>(); break;
    default: return false;
  }
  return true;
}

}  // namespace zen::kernels::avx2

#endif  // ZEN_HAVE_X86_SIMD
