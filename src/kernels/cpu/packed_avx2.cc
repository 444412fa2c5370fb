// AVX2 kernels over row-interleaved weights. A 32-byte register holds 4 consecutive quants
// of each of 8 rows; maddubs against 4 activation bytes broadcast to every lane leaves the
// 8 rows' partial sums in their own lanes. Per (row, token) the arithmetic is exactly
// packed.cc's reference: exact integer block sums, then one multiply and one FMA per block
// (Q4_K: two), so each lane matches it bit for bit whatever the token count.
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "kernels/cpu/fp_gemm.h"
#include "kernels/cpu/packed_avx2.h"
#include "kernels/cpu/packed_layout.h"

namespace zen::kernels::avx2 {
namespace {

using packed::ActQ8;
using packed::ActNvfp4;
using packed::ActQ8K;

#define ZEN_PACKED_TARGET ZEN_TARGET_AVX2
#include "kernels/cpu/packed_x86.inc"

// --- 32-element formats ------------------------------------------------------------------------

struct Q8_0Kernel {
  using Group = packed::GroupQ8_0;
  // One token's exact block sum from the weights and their magnitudes.
  ZEN_TARGET_AVX2 static __m256i block_sum(const __m256i* w, const __m256i* wabs, const ActQ8& a) {
    __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      // |w| * (a with w's sign) = w * a, within maddubs' u8 x s8 range.
      const __m256i p = _mm256_maddubs_epi16(wabs[k], _mm256_sign_epi8(broadcast4(a.qs + 4 * k), w[k]));
      s = _mm256_add_epi32(s, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    }
    return s;
  }
  ZEN_TARGET_AVX2 static __m256 accumulate(__m256 acc, const Group& g, const ActQ8& a, __m256i s) {
    return _mm256_fmadd_ps(_mm256_mul_ps(scales8(g.d), _mm256_set1_ps(a.d)), _mm256_cvtepi32_ps(s), acc);
  }
  ZEN_TARGET_AVX2 static void block(const Group& g, const uint8_t* act, size_t act_row, int64_t i, int n, __m256* acc) {
    __m256i w[8], wabs[8];
    q8_0_weights(g, w, wabs);
    over_tokens(n, [&]<int T>(int t0) ZEN_TARGET_AVX2 {
#pragma GCC unroll 4
      for (int t = t0; t < t0 + T; ++t) {
        const ActQ8& a = act_block<ActQ8>(act, act_row, t, i);
        acc[t] = accumulate(acc[t], g, a, block_sum(w, wabs, a));
      }
    });
  }
  // A few tokens: decode's loop with the T tokens innermost, each weight register loaded once
  // and used T times, the sums in registers. The same integer sums and float operations as
  // block(), so the same bits.
  static constexpr int kFewTokens = 3;
  template <int T>
  ZEN_TARGET_AVX2 static void decode_tokens(const Group* g, const uint8_t* act, size_t act_row, int64_t nb,
                                          __m256* acc) {
    for (int64_t i = 0; i < nb; ++i, ++g) {
      prefetch_block(g, sizeof(*g));
      const ActQ8* a[T];
      __m256i s[T];
      for (int t = 0; t < T; ++t) {
        a[t] = &act_block<ActQ8>(act, act_row, t, i);
        s[t] = _mm256_setzero_si256();
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i w = load256(g->qs + 32 * k), wabs = _mm256_sign_epi8(w, w);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(broadcast4(a[t]->qs + 4 * k), w));
          s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        }
      }
      for (int t = 0; t < T; ++t) acc[t] = accumulate(acc[t], *g, *a[t], s[t]);
    }
  }
  // Decode (one token): each weight register used once, straight from its load (holding all
  // 16 in registers, as block() does for a tile of tokens, spills at one token).
  ZEN_TARGET_AVX2 static __m256 decode(const Group* g, const uint8_t* act, int64_t nb) {
    const auto* a = reinterpret_cast<const ActQ8*>(act);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i, ++g) {
      prefetch_block(g, sizeof(*g));
      __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i w = load256(g->qs + 32 * k);
        const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(broadcast4(a[i].qs + 4 * k), w));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
      }
      acc = accumulate(acc, *g, a[i], s);
    }
    return acc;
  }
};

// Q4_0 (kFiveBit false) and Q5_0: unsigned quants, the offset subtracted via the block sum.
template <bool kFiveBit>
struct Q4Q5Kernel {
  using Group = std::conditional_t<kFiveBit, packed::GroupQ5_0, packed::GroupQ4_0>;

  // One token's exact block sum, the offset (8 or 16, folded into the activations' offset_sum)
  // subtracted.
  ZEN_TARGET_AVX2 static __m256i block_sum(const __m256i* w, const ActQ8& a) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s;
    if constexpr (kFiveBit) {  // 2 * 31 * 127 per 16-bit lane: add 4 maddubs at most
      __m256i lo = _mm256_maddubs_epi16(w[0], broadcast4(a.qs));
      __m256i hi = _mm256_maddubs_epi16(w[4], broadcast4(a.qs + 16));
#pragma GCC unroll 3
      for (int k = 1; k < 4; ++k) {
        lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(w[k], broadcast4(a.qs + 4 * k)));
        hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(w[k + 4], broadcast4(a.qs + 16 + 4 * k)));
      }
      s = _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones));
    } else {  // 2 * 15 * 127 per lane: all 8 fit
      __m256i s16 = _mm256_maddubs_epi16(w[0], broadcast4(a.qs));
#pragma GCC unroll 7
      for (int k = 1; k < 8; ++k) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[k], broadcast4(a.qs + 4 * k)));
      s = _mm256_madd_epi16(s16, ones);
    }
    return _mm256_sub_epi32(s, _mm256_set1_epi32(a.offset_sum));
  }

  ZEN_TARGET_AVX2 static __m256 accumulate(__m256 acc, __m256 dw, const ActQ8& a, __m256i s) {
    return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a.d)), _mm256_cvtepi32_ps(s), acc);
  }

  ZEN_TARGET_AVX2 static void block(const Group& g, const uint8_t* act, size_t act_row, int64_t i, int n, __m256* acc) {
    const __m256 dw = scales8(g.d);
    __m256i w[8];
    unpack_q4q5(g, w);
    over_tokens(n, [&]<int T>(int t0) ZEN_TARGET_AVX2 {
#pragma GCC unroll 4
      for (int t = t0; t < t0 + T; ++t) {
        const ActQ8& a = act_block<ActQ8>(act, act_row, t, i);
        acc[t] = accumulate(acc[t], dw, a, block_sum(w, a));
      }
    });
  }

  // A few tokens: each block unpacked once for the T tokens, their sums in registers; the
  // same operations as block(), so the same bits. Only 2: at 3 its 8 weight registers, the
  // sums and Q5_0's high bits spill.
  static constexpr int kFewTokens = 2;
  template <int T>
  ZEN_TARGET_AVX2 static void decode_tokens(const Group* g, const uint8_t* act, size_t act_row, int64_t nb,
                                          __m256* acc) {
    for (int64_t i = 0; i < nb; ++i, ++g) {
      prefetch_block(g, sizeof(*g));
      __m256i w[8];
      unpack_q4q5(*g, w);
      const __m256 dw = scales8(g->d);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const ActQ8& a = act_block<ActQ8>(act, act_row, t, i);
        acc[t] = accumulate(acc[t], dw, a, block_sum(w, a));
      }
    }
  }

  // Decode (one token): the sum in a register across the group's blocks; the same operations.
  ZEN_TARGET_AVX2 static __m256 decode(const Group* g, const uint8_t* act, int64_t nb) {
    const auto* a = reinterpret_cast<const ActQ8*>(act);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i, ++g) {
      prefetch_block(g, sizeof(*g));
      __m256i w[8];
      unpack_q4q5(*g, w);
      acc = accumulate(acc, scales8(g->d), a[i], block_sum(w, a[i]));
    }
    return acc;
  }
};

// NVFP4: codes looked up as 2 * e2m1 + 12 (unsigned, 0..24), the offset subtracted per group
// of 16 via the activation sums; two groups per block, each with its own row scales.
struct Nvfp4Kernel {
  using Group = packed::GroupNvfp4;

  // One token's block: the two groups' exact integer sums (each lane one row).
  ZEN_TARGET_AVX2 static void group_sums(const __m256i* w, const ActNvfp4& a, __m256i* s0, __m256i* s1) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i h[2];
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const __m256i* wk = w + 4 * half;
      const int8_t* aq = a.qs + 16 * half;
      // 4 x 2 * 24 * 127 per 16-bit lane: fits.
      const __m256i s16 = _mm256_add_epi16(
          _mm256_add_epi16(_mm256_maddubs_epi16(wk[0], broadcast4(aq)), _mm256_maddubs_epi16(wk[1], broadcast4(aq + 4))),
          _mm256_add_epi16(_mm256_maddubs_epi16(wk[2], broadcast4(aq + 8)),
                           _mm256_maddubs_epi16(wk[3], broadcast4(aq + 12))));
      h[half] = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(a.offset_sums[half]));
    }
    *s0 = h[0];
    *s1 = h[1];
  }

  // acc + d * (sc0 * s0 + sc1 * s1), the reference's order.
  ZEN_TARGET_AVX2 static __m256 accumulate(__m256 acc, float d, __m256 sc0, __m256 sc1, __m256i s0, __m256i s1) {
    const __m256 t = _mm256_fmadd_ps(sc0, _mm256_cvtepi32_ps(s0), _mm256_mul_ps(sc1, _mm256_cvtepi32_ps(s1)));
    return _mm256_fmadd_ps(_mm256_set1_ps(d), t, acc);
  }

  ZEN_TARGET_AVX2 static void block(const Group& g, const uint8_t* act, size_t act_row, int64_t i, int n, __m256* acc) {
    __m256i w[8];
    nvfp4_weights(g, w);
    __m256 sc0, sc1;
    e4m3x16_scaled(g.sc[0], &sc0, &sc1);
    over_tokens(n, [&]<int T>(int t0) ZEN_TARGET_AVX2 {
#pragma GCC unroll 4
      for (int t = t0; t < t0 + T; ++t) {
        const ActNvfp4& a = act_block<ActNvfp4>(act, act_row, t, i);
        __m256i s0, s1;
        group_sums(w, a, &s0, &s1);
        acc[t] = accumulate(acc[t], a.d, sc0, sc1, s0, s1);
      }
    });
  }

  // Decode (one token): the group's blocks with the sum in a register; the same operations.
  ZEN_TARGET_AVX2 static __m256 decode(const Group* g, const uint8_t* act, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    const auto* a = reinterpret_cast<const ActNvfp4*>(act);
    for (int64_t i = 0; i < nb; ++i, ++g) {
      prefetch_block(g, sizeof(*g));
      __m256i w[8], s0, s1;
      nvfp4_weights(*g, w);
      __m256 sc0, sc1;
      e4m3x16_scaled(g->sc[0], &sc0, &sc1);
      group_sums(w, a[i], &s0, &s1);
      acc = accumulate(acc, a[i].d, sc0, sc1, s0, s1);
    }
    return acc;
  }
};

#define ZEN_MADD_ADD(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#include "kernels/cpu/packed_kquants.inc"

}  // namespace

void packed_groups(const PackedProblem& p, int64_t g0, int64_t g1) {
  switch (p.dtype) {
    case DType::Q8_0: return groups<Q8_0Kernel>(p, g0, g1);
    case DType::Q4_0: return groups<Q4Q5Kernel<false>>(p, g0, g1);
    case DType::Q5_0: return groups<Q4Q5Kernel<true>>(p, g0, g1);
    case DType::Q4_K: return groups<Q4_KKernel>(p, g0, g1);
    case DType::Q6_K: return groups<Q6_KKernel>(p, g0, g1);
    case DType::U8: return groups<Nvfp4Kernel>(p, g0, g1);  // NVFP4 codes
    default: fail("packed weights: dtype ", dtype_name(p.dtype), " has no packed kernel");
  }
}

}  // namespace zen::kernels::avx2

#endif  // ZEN_HAVE_X86_SIMD
