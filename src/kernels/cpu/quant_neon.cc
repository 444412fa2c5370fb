// NEON kernels for the block formats (aarch64 only; the file is empty elsewhere).
//
// Integer core: a block's weight quants and activation quants (int8) are multiplied and summed
// exactly in s32, either with SDOT (the dot-product extension, when the CPU has it) or with
// widening multiplies (SMULL + SADALP, baseline ARMv8.0). Each block's integer sum is then
// reduced to one scalar and fed to the same float operations, in the same order, as the scalar
// reference (quant_ref.cc). So every tile shape, with or without SDOT, gives each (row, token)
// exactly ref::vec_dot's value: batch-invariant by construction, and testable bit for bit.
// (This needs -ffp-contract=off, which CMake sets on aarch64: otherwise the compiler may fuse
// the reference's multiply-adds differently from ours.)
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_NEON
#include <arm_neon.h>
#include <sys/auxv.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_neon.h"

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)  // Linux arm64 hwcap bit of the dot-product extension
#endif

namespace zen::kernels::neon {

bool has_dotprod() {
  static const bool has = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  return has;
}

namespace {

// Exact f16 -> f32 (FCVTL), the same value as base/numeric's f16_to_f32.
inline float f16(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

// --- activation quantizers -------------------------------------------------------------------

inline float32x4_t abs_max(const float* x, int n) {
  float32x4_t m = vabsq_f32(vld1q_f32(x));
  for (int j = 4; j < n; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + j)));
  return m;
}

// 16 s32 -> 16 s8, saturating (the reference's clamp to -128..127).
inline int8x16_t narrow16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
  const int16x8_t lo = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
  const int16x8_t hi = vcombine_s16(vqmovn_s32(c), vqmovn_s32(d));
  return vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi));
}

// q = round-half-even(x * scale) for 16 floats (FCVTNS rounds to nearest even, like the
// reference's nearest_int); returns them saturated to s8.
inline int8x16_t quantize16(const float* x, float32x4_t scale, int32x4_t max_q) {
  int32x4_t q[4];
  for (int k = 0; k < 4; ++k) q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + 4 * k), scale)), max_q);
  return narrow16(q[0], q[1], q[2], q[3]);
}

// One Q8_0/Q8_1 block: d = amax/127, q = round-half-even(x * 127/amax). Returns d and the sum
// of the quants.
inline float quantize_block_q8(const float* x, int8_t* qs, int* sum) {
  const float amax = vmaxvq_f32(abs_max(x, kQK));
  const float d = amax / 127.f;
  const float32x4_t id = vdupq_n_f32(amax != 0.0f ? 127.f / amax : 0.0f);
  const int32x4_t no_limit = vdupq_n_s32(127);  // |x * id| <= 127 already
  const int8x16_t q0 = quantize16(x, id, no_limit), q1 = quantize16(x + 16, id, no_limit);
  vst1q_s8(qs, q0);
  vst1q_s8(qs + 16, q1);
  *sum = vaddlvq_s8(q0) + vaddlvq_s8(q1);
  return d;
}

}  // namespace

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sum;
    y[i].d = f32_to_f16(quantize_block_q8(x + kQK * i, y[i].qs, &sum));
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sum;
    const float d = quantize_block_q8(x + kQK * i, y[i].qs, &sum);
    y[i].d = f32_to_f16(d);
    y[i].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    const float amax = vmaxvq_f32(abs_max(x, kQKK));
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
    const float32x4_t mul = vdupq_n_f32(iscale);
    const int32x4_t limit = vdupq_n_s32(127);
    for (int j = 0; j < kQKK; j += 16) {
      const int8x16_t q = quantize16(x + j, mul, limit);
      vst1q_s8(y[i].qs + j, q);
      y[i].bsums[j / 16] = static_cast<int16_t>(vaddlvq_s8(q));
    }
    y[i].d = 1.0f / iscale;
  }
}

namespace {

// --- weight quants of one block, as two int8x16 (elements 0..15 and 16..31) ----------------

struct Quants32 {
  int8x16_t lo, hi;
};

template <typename Block>
inline const Block& block_at(const uint8_t* row, int64_t i) {
  return reinterpret_cast<const Block*>(row)[i];
}

// 16 bytes of nibbles: low nibbles are elements 0..15, high nibbles 16..31 (values 0..15).
inline Quants32 nibbles(const uint8_t* qs) {
  const uint8x16_t v = vld1q_u8(qs);
  return {vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8(v, 4))};
}

// The 32 bits of qh (little-endian) as 0x10 in byte j where bit j is set.
inline Quants32 fifth_bits(const uint8_t* qh) {
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bit = vld1q_u8(kBit), x10 = vdupq_n_u8(0x10);
  const uint8x16_t lo = vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), bit);
  const uint8x16_t hi = vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), bit);
  return {vreinterpretq_s8_u8(vandq_u8(lo, x10)), vreinterpretq_s8_u8(vandq_u8(hi, x10))};
}

inline Quants32 add(Quants32 q, int8_t v) { return {vaddq_s8(q.lo, vdupq_n_s8(v)), vaddq_s8(q.hi, vdupq_n_s8(v))}; }
inline Quants32 bit_or(Quants32 a, Quants32 b) { return {vorrq_s8(a.lo, b.lo), vorrq_s8(a.hi, b.hi)}; }

// Symmetric 32-element formats (value = d * q, q signed), dotted against Q8_0.
struct Q8_0W {
  using Block = BlockQ8_0;
  static Quants32 quants(const Block& b) { return {vld1q_s8(b.qs), vld1q_s8(b.qs + 16)}; }
};
struct Q4_0W {
  using Block = BlockQ4_0;
  static Quants32 quants(const Block& b) { return add(nibbles(b.qs), -8); }
};
struct Q5_0W {
  using Block = BlockQ5_0;
  static Quants32 quants(const Block& b) { return add(bit_or(nibbles(b.qs), fifth_bits(b.qh)), -16); }
};
// Offset formats (value = d * q + m, q unsigned), dotted against Q8_1.
struct Q4_1W {
  using Block = BlockQ4_1;
  static Quants32 quants(const Block& b) { return nibbles(b.qs); }
};
struct Q5_1W {
  using Block = BlockQ5_1;
  static Quants32 quants(const Block& b) { return bit_or(nibbles(b.qs), fifth_bits(b.qh)); }
};

// Q4_K / Q5_K (kHighBit): 8 groups of 32 quants (0..15 / 0..31), one 6-bit scale and min each.
template <bool kHighBit>
struct K4W {
  using Block = std::conditional_t<kHighBit, BlockQ5_K, BlockQ4_K>;
  static constexpr bool kScalePer16 = false;
  struct Prep {
    const Block* b;
    uint8_t sc[8], m[8];
    float d, dmin;
  };
  static Prep prepare(const Block& b) {
    Prep p;
    p.b = &b;
    k4_unpack_scales(b.scales, p.sc, p.m);
    p.d = f16(b.d);
    p.dmin = f16(b.dmin);
    return p;
  }
  // Group j: elements 32j..32j+31 = low (j even) or high (j odd) nibbles of qs[32*(j/2)..].
  static Quants32 group(const Prep& p, int j) {
    const uint8_t* qs = p.b->qs + 32 * (j / 2);
    const uint8x16_t b0 = vld1q_u8(qs), b1 = vld1q_u8(qs + 16), low4 = vdupq_n_u8(0x0F);
    uint8x16_t q0 = (j & 1) ? vshrq_n_u8(b0, 4) : vandq_u8(b0, low4);
    uint8x16_t q1 = (j & 1) ? vshrq_n_u8(b1, 4) : vandq_u8(b1, low4);
    if constexpr (kHighBit) {  // bit j of qh[l] is the 5th bit of element l of group j
      const uint8x16_t bit = vdupq_n_u8(static_cast<uint8_t>(1u << j)), x10 = vdupq_n_u8(0x10);
      q0 = vorrq_u8(q0, vandq_u8(vtstq_u8(vld1q_u8(p.b->qh), bit), x10));
      q1 = vorrq_u8(q1, vandq_u8(vtstq_u8(vld1q_u8(p.b->qh + 16), bit), x10));
    }
    return {vreinterpretq_s8_u8(q0), vreinterpretq_s8_u8(q1)};
  }
  static int scale(const Prep& p, int j, int) { return p.sc[j]; }
  // The reference's float operations: acc += d*d_a*isum - dmin*d_a*sum_s(m[s]*bsum of s).
  static float finish(const Prep& p, const BlockQ8_K& a, int isum, float acc) {
    int msum = 0;
    for (int s = 0; s < 8; ++s) msum += p.m[s] * (a.bsums[2 * s] + a.bsums[2 * s + 1]);
    return acc + (p.d * a.d * static_cast<float>(isum) - p.dmin * a.d * static_cast<float>(msum));
  }
};

// Q6_K: 16 sub-blocks of 16 with int8 scales; quants q - 32 in -32..31.
struct Q6KW {
  using Block = BlockQ6_K;
  static constexpr bool kScalePer16 = true;
  struct Prep {
    const Block* b;
    float d;
  };
  static Prep prepare(const Block& b) { return {&b, f16(b.d)}; }
  // Group j = 4h + g: elements 128h + 32g + l (l < 32); low 4 bits from ql, high 2 from qh.
  static Quants32 group(const Prep& p, int j) {
    const int h = j / 4, g = j % 4;
    const uint8_t* ql = p.b->ql + 64 * h + 32 * (g & 1);
    const uint8_t* qh = p.b->qh + 32 * h;
    const uint8x16_t low4 = vdupq_n_u8(0x0F), three = vdupq_n_u8(3);
    const int8x16_t down = vdupq_n_s8(static_cast<int8_t>(-2 * g));  // shift right by 2g
    uint8x16_t q[2];
    for (int half = 0; half < 2; ++half) {
      const uint8x16_t l = vld1q_u8(ql + 16 * half);
      const uint8x16_t lo = g < 2 ? vandq_u8(l, low4) : vshrq_n_u8(l, 4);
      const uint8x16_t hi = vshlq_n_u8(vandq_u8(vshlq_u8(vld1q_u8(qh + 16 * half), down), three), 4);
      q[half] = vorrq_u8(lo, hi);
    }
    return add({vreinterpretq_s8_u8(q[0]), vreinterpretq_s8_u8(q[1])}, -32);
  }
  static int scale(const Prep& p, int j, int half) { return p.b->scales[2 * j + half]; }
  static float finish(const Prep& p, const BlockQ8_K& a, int isum, float acc) {
    return acc + p.d * a.d * static_cast<float>(isum);
  }
};

}  // namespace

// The tiles, twice: with widening multiplies, and with SDOT for CPUs that have it.
namespace widen {
namespace {
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));  // |a*b| <= 2^14: no s16 overflow
  return vpadalq_s16(acc, vmull_high_s8(a, b));
}
}  // namespace
#include "kernels/cpu/quant_neon_tiles.inc"
}  // namespace widen

// arm_neon.h declares SDOT under armv8.2-a+dotprod, so the caller must be at least that (a CPU
// with the extension implements ARMv8.2 in practice; it is mandatory from ARMv8.4).
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
namespace sdot {
namespace {
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
}  // namespace
#include "kernels/cpu/quant_neon_tiles.inc"
}  // namespace sdot
#pragma GCC pop_options

// --- plain formats against f32 ----------------------------------------------------------------
namespace {

struct F32Elem {
  using Elem = float;
  static float32x4_t load(const float* p) { return vld1q_f32(p); }
  static float widen(float v) { return v; }
};
struct F16Elem {
  using Elem = uint16_t;
  static float32x4_t load(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static float widen(uint16_t v) { return f16(v); }
};
struct BF16Elem {
  using Elem = uint16_t;
  static float32x4_t load(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
  static float widen(uint16_t v) { return bf16_to_f32(v); }
};

// Each (row, token) pair: two accumulators over alternate 4-element chunks (8 per step), one
// more chunk of 4 if left, a horizontal add, then a scalar tail; the same in every tile shape.
template <typename E>
struct Plain {
  using Elem = typename E::Elem;
  template <int R, int T>
  static void tile(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t k, float* y, ptrdiff_t yr,
                   ptrdiff_t yt) {
    float32x4_t acc0[R][T], acc1[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc0[r][t] = acc1[r][t] = vdupq_n_f32(0.0f);
    int64_t j = 0;
    for (; j + 8 <= k; j += 8) {
      float32x4_t w0[R], w1[R];
      for (int r = 0; r < R; ++r) {
        const Elem* row = reinterpret_cast<const Elem*>(w + r * ws);
        w0[r] = E::load(row + j);
        w1[r] = E::load(row + j + 4);
      }
      for (int t = 0; t < T; ++t) {
        const float* x = reinterpret_cast<const float*>(a + t * as);
        const float32x4_t x0 = vld1q_f32(x + j), x1 = vld1q_f32(x + j + 4);
        for (int r = 0; r < R; ++r) {
          acc0[r][t] = vfmaq_f32(acc0[r][t], w0[r], x0);
          acc1[r][t] = vfmaq_f32(acc1[r][t], w1[r], x1);
        }
      }
    }
    if (j + 4 <= k) {
      for (int r = 0; r < R; ++r) {
        const float32x4_t w0 = E::load(reinterpret_cast<const Elem*>(w + r * ws) + j);
        for (int t = 0; t < T; ++t)
          acc0[r][t] = vfmaq_f32(acc0[r][t], w0, vld1q_f32(reinterpret_cast<const float*>(a + t * as) + j));
      }
      j += 4;
    }
    for (int r = 0; r < R; ++r) {
      const Elem* row = reinterpret_cast<const Elem*>(w + r * ws);
      for (int t = 0; t < T; ++t) {
        const float* x = reinterpret_cast<const float*>(a + t * as);
        float sum = vaddvq_f32(vaddq_f32(acc0[r][t], acc1[r][t]));
        for (int64_t i = j; i < k; ++i) sum += E::widen(row[i]) * x[i];
        y[r * yr + t * yt] = sum;
      }
    }
  }
};

template <typename E, int R, int T>
constexpr DotTileFn plain_tile = &Plain<E>::template tile<R, T>;

template <typename E>
float plain_dot(const void* w, const void* act, int64_t n) {
  float y;
  Plain<E>::template tile<1, 1>(static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(act), 0, n, &y, 0, 0);
  return y;
}

template <typename E>
DotKernels plain_kernels() {
  DotKernels k;
  k.tile_rows = 1;
  k.rows = plain_tile<E, 1, 1>;
  k.tokens[0] = plain_tile<E, 1, 1>;
  k.tokens[1] = plain_tile<E, 1, 2>;
  k.tokens[2] = plain_tile<E, 1, 3>;
  k.tokens[3] = plain_tile<E, 1, 4>;
  k.block_rows = 2;
  k.block_tokens = 4;
  k.block = plain_tile<E, 2, 4>;
  return k;
}

}  // namespace

VecDotFn dot_fn(DType t) {
  switch (t) {
    case DType::F32: return plain_dot<F32Elem>;
    case DType::F16: return plain_dot<F16Elem>;
    case DType::BF16: return plain_dot<BF16Elem>;
    default: return has_dotprod() ? sdot::quant_dot_fn(t) : widen::quant_dot_fn(t);
  }
}

bool tiled_kernels(DType t, DotKernels* out) {
  switch (t) {
    case DType::F32: *out = plain_kernels<F32Elem>(); return true;
    case DType::F16: *out = plain_kernels<F16Elem>(); return true;
    case DType::BF16: *out = plain_kernels<BF16Elem>(); return true;
    default: return has_dotprod() ? sdot::quant_tiled_kernels(t, out) : widen::quant_tiled_kernels(t, out);
  }
}

}  // namespace zen::kernels::neon

#endif  // ZEN_HAVE_NEON
