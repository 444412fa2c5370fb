// Layouts of the row-interleaved weights (packed.h) and of the activations they are dotted
// with. Internal to kernels/cpu. In a group, r is the row (0..7) and b the byte of a 4-element
// k-group; "q[r][e]" is element e of row r's block as an integer quant of the source format.
#pragma once
#include <cstdint>

namespace zen::kernels::packed {

constexpr int kGroupRows = 8;

// Activations for the 32-element formats: Q8_0 quants (exactly quantize_row_q8_0's) plus
// their sum times the weights' unsigned offset, which those formats subtract in integers.
struct ActQ8 {
  float d;             // the f16 scale of the Q8_0 block, widened
  int32_t offset_sum;  // sum of qs x the weight format's offset: 8 (Q4_0), 16 (Q5_0), 0 (Q8_0)
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

// Activations for NVFP4: a Q8_0 block (d and quants exactly quantize_row_q8_0's) with the
// quants reordered to match GroupNvfp4's nibbles, and per half (one NVFP4 group of 16) the
// sum of its quants times kNvfp4LutOffset, which the kernels subtract in integers.
// Element e = 8j + 2b + o (j < 4, b < 4, o < 2) sits at qs[nvfp4_act_pos(e)] = qs[8j + 4o + b],
// so each half keeps its own 16 elements.
constexpr int kNvfp4LutOffset = 12;
constexpr int nvfp4_act_pos(int e) { return 8 * (e / 8) + 4 * (e % 2) + (e % 8) / 2; }
struct ActNvfp4 {
  float d;
  int32_t offset_sums[2];
  int8_t qs[32];
};
static_assert(sizeof(ActNvfp4) == 44);

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
// NVFP4, blocks of 32 elements = two groups of 16 (h = 0, 1). qs[32j + 4r + b] is byte 4j + b
// of row r's 16 source bytes (j < 4), i.e. E2M1 codes c[r][8j + 2b] (low nibble) and
// c[r][8j + 2b + 1] (high nibble); sc[h][r] is the E4M3 scale of row r's group h.
// value = e2m1(c) * e4m3(sc) * weight_scale_2. The kernels look codes up as 2 * e2m1 +
// kNvfp4LutOffset (0..24, unsigned, exact) and scales as e4m3 * 2^-8 (exact in f16).
struct GroupNvfp4 {
  uint8_t sc[2][8];
  uint8_t qs[128];
};
static_assert(sizeof(GroupQ8_0) == 8 * 34);
static_assert(sizeof(GroupQ4_0) == 8 * 18);
static_assert(sizeof(GroupQ5_0) == 8 * 22);
static_assert(sizeof(GroupQ4_K) == 8 * 144 + 32);
static_assert(sizeof(GroupQ6_K) == 8 * 210);
static_assert(sizeof(GroupNvfp4) == 8 * 18);

}  // namespace zen::kernels::packed
