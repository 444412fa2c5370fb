// Storage layouts of the GGUF weight block formats (ggml-common.h) and small helpers shared
// by the scalar and SIMD kernels. Internal to kernels/cpu.
#pragma once
#include <cstdint>
#include <cstring>

#include "base/numeric.h"

namespace zen::kernels {

constexpr int kQK = 32;    // elements per Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 block
constexpr int kQKK = 256;  // elements per k-quant super-block

struct BlockQ4_0 {
  uint16_t d;       // f16 scale
  uint8_t qs[16];   // element j: low nibble of qs[j]; element j+16: high nibble; value q-8
};
struct BlockQ4_1 {
  uint16_t d;       // f16 scale
  uint16_t m;       // f16 minimum: value = q*d + m
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];    // bit j (little-endian u32) = 5th bit of element j
  uint8_t qs[16];   // low 4 bits as in Q4_0; value (q | h<<4) - 16
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// Q4_K: 8 sub-blocks of 32, each with a 6-bit scale and a 6-bit min (packed in `scales`).
// value = d*sc[s]*q - dmin*m[s]; qs holds 4 chunks of 64 elements: 32 bytes, low nibbles =
// first 32 elements of the chunk, high nibbles = next 32.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// Q5_K: Q4_K plus a 5th bit per element; qh[l] bit 2c is element l of chunk c's low half,
// bit 2c+1 element l of its high half.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// Q6_K: 16 sub-blocks of 16 with int8 scales; value = d*scales[s]*(q - 32), q 6 bits split
// into ql (low 4) and qh (high 2), in two halves of 128 elements.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

inline float fp16(uint16_t h) { return f16_to_f32(h); }

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Sub-block j (0..7) scale and min of a Q4_K/Q5_K block (ggml's get_scale_min_k4): the first
// four are the low 6 bits of bytes 0..3 / 4..7; the last four combine a nibble of bytes 8..11
// with the top two bits of bytes 0..3 / 4..7.
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// All eight scales and mins at once.
inline void k4_unpack_scales(const uint8_t* q, uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 8; ++j) k4_scale_min(j, q, &sc[j], &m[j]);
}

}  // namespace zen::kernels
