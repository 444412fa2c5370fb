// Scalar conversions between f32 and the storage types of the family.
#pragma once
#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstring>

namespace zen {

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }

// Round to nearest even, NaN stays NaN (as torch does).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_to_f32(sign);
    // Subnormal: value = mant * 2^-24.
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return (sign != 0u) ? -v : v;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (mant << 13));
  return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round to nearest even with overflow to inf (IEEE binary16).
inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (x < 0x38800000u) {                                                // subnormal or zero
    const float a = bits_to_f32(x);
    // Scale so that one f16 subnormal ulp (2^-24) becomes 1.0, then round to nearest even.
    const float scaled = a * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t r = x + 0xfffu + ((x >> 13) & 1u) - (112u << 23);
  return static_cast<uint16_t>(sign | (r >> 13));
}

// FP8 (OCP): E4M3 "fn" (bias 7, no infinities, 0x7f/0xff are NaN, max 448) and E5M2
// (bias 15, IEEE-like, max 57344). Decoding is exact; encoding rounds to nearest even and
// saturates to the largest finite value (as torch's float8 casts do for in-range inputs and
// as vLLM's fp8 KV cache does), NaN stays NaN.
inline float fp8_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, mant = b & 0x7u;
  if (exp == 0xf && mant == 0x7) return bits_to_f32(sign | 0x7fc00000u);
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 512.0f);  // mant * 2^-9
    return sign != 0u ? -v : v;
  }
  return bits_to_f32(sign | ((exp + 120u) << 23) | (mant << 20));
}

inline float fp8_e5m2_to_f32(uint8_t b) { return f16_to_f32(static_cast<uint16_t>(b) << 8); }

namespace detail {
// Rounds |f| to a float with `mant_bits` mantissa bits and minimum normal exponent
// `min_exp` (subnormals below it), nearest even, then saturates at max_finite.
inline float round_to_minifloat(float f, int mant_bits, int min_exp, float max_finite) {
  const float a = std::fabs(f);
  if (a >= max_finite) return max_finite;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int exp = std::max(e - 1, min_exp);
  const float quantum = std::ldexp(1.0f, exp - mant_bits);
  const float r = std::nearbyint(a / quantum) * quantum;  // default rounding: nearest even
  return std::min(r, max_finite);
}
}  // namespace detail

// The encoders' definition, in float arithmetic: |f| rounded at the format's quantum, nearest
// even, saturating (tests check the integer encoders below against these).
namespace ref {
inline uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float r = detail::round_to_minifloat(f, 3, -6, 448.0f);
  if (r == 0.0f) return sign;
  int e;
  const float m = std::frexp(r, &e);  // r = m * 2^e
  const int exp = e - 1;
  if (exp < -6) return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::lround(r * 512.0f)));
  const auto mant = static_cast<uint8_t>(std::lround((m * 2.0f - 1.0f) * 8.0f));
  return static_cast<uint8_t>(sign | ((exp + 7) << 3) | mant);
}

inline uint8_t f32_to_fp8_e5m2(float f) {
  if (std::isnan(f)) return 0x7e;
  const float r = detail::round_to_minifloat(f, 2, -14, 57344.0f);
  return static_cast<uint8_t>(f32_to_f16(std::signbit(f) ? -r : r) >> 8);  // exact in f16
}
}  // namespace ref

namespace detail {
// FP8 with `mant_bits` mantissa bits, exponent bias `bias` and largest finite code
// `max_code`, from f32 bits in integer arithmetic (the KV cache encodes every stored element;
// the float definition above calls frexp, ldexp and lround per element). Normal results:
// the f32 mantissa rounded to mant_bits, nearest even, the carry running into the exponent;
// below the smallest normal, the value counted in quanta of the smallest subnormal, rounded
// to nearest even by the 2^23 addition (exact: the count is below 2^4).
inline uint8_t f32_to_fp8(float f, int mant_bits, int bias, uint32_t max_bits, uint8_t max_code, uint8_t nan_code) {
  const uint32_t u = f32_to_bits(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return nan_code;
  if (a >= max_bits) return static_cast<uint8_t>(sign | max_code);
  const int drop = 23 - mant_bits;
  const uint32_t min_normal_exp = static_cast<uint32_t>(127 + 1 - bias);  // f32 exponent field
  if ((a >> 23) >= min_normal_exp) {
    const uint32_t r = (a + (1u << (drop - 1)) - 1u + ((a >> drop) & 1u)) >> drop;
    const uint32_t code = r - ((static_cast<uint32_t>(127 - bias)) << mant_bits);
    return static_cast<uint8_t>(sign | std::min<uint32_t>(code, max_code));
  }
  // |f| / smallest subnormal, exact (a power-of-two scaling of a value below 2^4).
  const float count = bits_to_f32(a) * bits_to_f32(static_cast<uint32_t>(127 + bias - 1 + mant_bits) << 23);
  const float rounded = (count + 8388608.0f) - 8388608.0f;  // nearest even (default rounding)
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(rounded));
}
}  // namespace detail

// E4M3: bias 7, max 448 (0x7e), NaN 0x7f. E5M2: bias 15, max 57344 (0x7b), NaN 0x7e.
inline uint8_t f32_to_fp8_e4m3(float f) { return detail::f32_to_fp8(f, 3, 7, 0x43e00000u, 0x7e, 0x7f); }
inline uint8_t f32_to_fp8_e5m2(float f) { return detail::f32_to_fp8(f, 2, 15, 0x47600000u, 0x7b, 0x7e); }

}  // namespace zen
