// Layouts of the row-interleaved weights (packed.h) and of the activations they are dotted
// with. Internal to kernels/cpu. In a group, r is the row (0..7) and b the byte of a 4-element
// k-group; "q[r][e]" is element e of row r's block as an integer quant of the source format.
#pragma once
#include <cstdint>

namespace zen::kernels::packed {

constexpr int kGroupRows = 8;

// Activations for the 32-element formats: Q8_0 quants (exactly quantize_row_q8_0's) plus
// their sum, so formats stored with an unsigned offset can subtract it in integers.
struct ActQ8 {
  float d;      // the f16 scale of the Q8_0 block, widened
  int32_t sum;  // sum of qs
  int8_t qs[32];
};
static_assert(sizeof(ActQ8) == 40);

// Activations for the k-quants: Q8_K (quantize_row_q8_K's bytes) plus sums per 32.
struct ActQ8K {
  float d;
  int16_t bsums[16];   // sums of each 16 quants
  int16_t sums32[8];   // bsums[2j] + bsums[2j+1]
  int8_t qs[256];
};
static_assert(sizeof(ActQ8K) == 308);

// Q8_0: qs[32g + 4r + b] = q[r][4g + b] (signed).
struct GroupQ8_0 {
  uint16_t d[8];  // f16 scales of the 8 rows
  int8_t qs[256];
};
// Q4_0: qs[32j + 4r + b] = q[r][4j + b] | q[r][4(j + 4) + b] << 4, j < 4; value q - 8.
struct GroupQ4_0 {
  uint16_t d[8];
  uint8_t qs[128];
};
// Q5_0: low 4 bits as Q4_0; bit g of qh[4r + b] = bit 4 of q[r][4g + b]; value q - 16.
struct GroupQ5_0 {
  uint16_t d[8];
  uint8_t qs[128];
  uint8_t qh[32];
};
// Q4_K super-block: sub-block j of row r has scale sc[j][r], minimum m[j][r];
// qs[256p + 32g + 4r + b] = q[r][64p + 4g + b] | q[r][64p + 32 + 4g + b] << 4 (sub-blocks 2p
// and 2p + 1, p < 4, g < 8). value = d*sc*q - dmin*m.
struct GroupQ4_K {
  uint16_t d[8];
  uint16_t dmin[8];
  uint8_t sc[8][8];
  uint8_t m[8][8];
  uint8_t qs[1024];
};
// Q6_K super-block, k-groups G = e / 4 (0..63), sub-blocks of 16 (s = G / 4):
// ql[32i + 4r + b] = (q[r][4i + b] & 15) | (q[r][4(i + 32) + b] & 15) << 4, i < 32;
// bits 2m, 2m+1 of qh[32j + 4r + b] = q[r][4(j + 16m) + b] >> 4, j < 16, m < 4.
// value = d * sc[s][r] * (q - 32).
struct GroupQ6_K {
  uint16_t d[8];
  int8_t sc[16][8];
  uint8_t ql[1024];
  uint8_t qh[512];
};
static_assert(sizeof(GroupQ8_0) == 8 * 34);
static_assert(sizeof(GroupQ4_0) == 8 * 18);
static_assert(sizeof(GroupQ5_0) == 8 * 22);
static_assert(sizeof(GroupQ4_K) == 8 * 144 + 32);
static_assert(sizeof(GroupQ6_K) == 8 * 210);

}  // namespace zen::kernels::packed
