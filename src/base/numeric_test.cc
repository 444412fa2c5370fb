#include "base/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace zen {
namespace {

TEST(Numeric, Fp8E4M3RoundTripsEveryCode) {
  for (int b = 0; b < 256; ++b) {
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(v)) continue;
    const uint8_t back = f32_to_fp8_e4m3(v);
    if (v == 0.0f) {
      EXPECT_EQ(back & 0x7f, 0) << b;
      continue;
    }
    EXPECT_EQ(back, b) << "code " << b << " value " << v;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(Numeric, Fp8E5M2RoundTripsEveryFiniteCode) {
  for (int b = 0; b < 256; ++b) {
    const float v = fp8_e5m2_to_f32(static_cast<uint8_t>(b));
    if (!std::isfinite(v) || v == 0.0f) continue;
    EXPECT_EQ(f32_to_fp8_e5m2(v), b) << "code " << b << " value " << v;
  }
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);
}

// Encoding picks the nearest representable value (ties to even) and saturates.
TEST(Numeric, Fp8EncodingIsNearestAndSaturates) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-500.0f, 500.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = i % 2 ? d(rng) : d(rng) / 1000.0f;
    const float got = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x));
    float best = 0, best_err = INFINITY;
    for (int b = 0; b < 256; ++b) {
      const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
      if (std::isnan(v)) continue;
      if (std::fabs(v - x) < best_err) best_err = std::fabs(v - x), best = v;
    }
    EXPECT_EQ(std::fabs(got - x), best_err) << x << " -> " << got << ", nearest " << best;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(1e6f)), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(-1e6f)), -448.0f);
  EXPECT_EQ(fp8_e5m2_to_f32(f32_to_fp8_e5m2(1e9f)), 57344.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(NAN))));
}

// The integer encoders equal the float definition (ref::) on every 101st f32 bit pattern (42.5
// million values, both signs, NaN, infinities, denormals) and on every value within 2 ulp of
// each code's value and of each midpoint between neighbouring codes (the rounding boundaries).
TEST(Numeric, Fp8IntegerEncodersEqualTheDefinition) {
  auto check = [](float x) {
    ASSERT_EQ(f32_to_fp8_e4m3(x), ref::f32_to_fp8_e4m3(x)) << "e4m3 bits " << std::hex << f32_to_bits(x);
    ASSERT_EQ(f32_to_fp8_e5m2(x), ref::f32_to_fp8_e5m2(x)) << "e5m2 bits " << std::hex << f32_to_bits(x);
  };
  for (uint64_t u = 0; u <= 0xffffffffu; u += 101) check(bits_to_f32(static_cast<uint32_t>(u)));
  for (int b = 0; b < 256; ++b)
    for (const float v : {fp8_e4m3_to_f32(static_cast<uint8_t>(b)), fp8_e5m2_to_f32(static_cast<uint8_t>(b)),
                          (fp8_e4m3_to_f32(static_cast<uint8_t>(b)) + fp8_e4m3_to_f32(static_cast<uint8_t>(b + 1))) / 2,
                          (fp8_e5m2_to_f32(static_cast<uint8_t>(b)) + fp8_e5m2_to_f32(static_cast<uint8_t>(b + 1))) / 2}) {
      if (!std::isfinite(v)) continue;
      for (int d = -2; d <= 2; ++d) check(bits_to_f32(f32_to_bits(v) + static_cast<uint32_t>(d)));
    }
}

TEST(Numeric, Bf16AndF16RoundToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000u)), 0x3f82);
  for (int h = 0; h < 0x7c00; ++h) EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
}

}  // namespace
}  // namespace zen
