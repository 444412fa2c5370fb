// Packing (source blocks -> interleaved groups), the scalar reference of the packed
// arithmetic, and the matmul driver. The AVX2 kernels live in packed_avx2.cc.
#include "kernels/cpu/packed.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/packed_avx2.h"
#include "kernels/cpu/packed_layout.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/simd.h"

namespace zen::kernels {
namespace {

using packed::ActQ8;
using packed::ActNvfp4;
using packed::ActQ8K;
using packed::kGroupRows;

// NVFP4 has no DType of its own: its codes are stored as U8, so U8 selects it here.
constexpr DType kNvfp4 = DType::U8;

// One row's block in plain integers: the common ground of the source and packed layouts.
struct RowBlock {
  uint16_t d = 0, dmin = 0;  // f16 bits
  int8_t sc[16] = {};        // Q4_K: 8 scales (0..63); Q6_K: 16 scales
  uint8_t m[8] = {};         // Q4_K minimums
  uint8_t e4m3[2] = {};      // NVFP4: the two groups' scale codes
  int16_t q[256] = {};       // quants as stored (unsigned offsets kept: Q4_0 0..15, ...;
                             // NVFP4: E2M1 codes 0..15, in element order)
};

int block_elems(DType t) { return (t == DType::Q4_K || t == DType::Q6_K) ? kQKK : kQK; }

size_t group_block_bytes(DType t) {
  switch (t) {
    case DType::Q8_0: return sizeof(packed::GroupQ8_0);
    case DType::Q4_0: return sizeof(packed::GroupQ4_0);
    case DType::Q5_0: return sizeof(packed::GroupQ5_0);
    case DType::Q4_K: return sizeof(packed::GroupQ4_K);
    case DType::Q6_K: return sizeof(packed::GroupQ6_K);
    case kNvfp4: return sizeof(packed::GroupNvfp4);
    default: fail("packed weights: dtype ", dtype_name(t), " has no packed form");
  }
}

// --- source blocks (ggml layouts) <-> RowBlock ----------------------------------------------

void read_source(DType t, const uint8_t* p, RowBlock& o) {
  switch (t) {
    case DType::Q8_0: {
      const auto& b = *reinterpret_cast<const BlockQ8_0*>(p);
      o.d = b.d;
      for (int i = 0; i < kQK; ++i) o.q[i] = b.qs[i];
      return;
    }
    case DType::Q4_0: {
      const auto& b = *reinterpret_cast<const BlockQ4_0*>(p);
      o.d = b.d;
      for (int i = 0; i < 16; ++i) {
        o.q[i] = b.qs[i] & 15;
        o.q[i + 16] = b.qs[i] >> 4;
      }
      return;
    }
    case DType::Q5_0: {
      const auto& b = *reinterpret_cast<const BlockQ5_0*>(p);
      o.d = b.d;
      const uint32_t qh = load_u32(b.qh);
      for (int i = 0; i < 16; ++i) {
        o.q[i] = static_cast<int16_t>((b.qs[i] & 15) | (((qh >> i) & 1) << 4));
        o.q[i + 16] = static_cast<int16_t>((b.qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4));
      }
      return;
    }
    case DType::Q4_K: {
      const auto& b = *reinterpret_cast<const BlockQ4_K*>(p);
      o.d = b.d;
      o.dmin = b.dmin;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        k4_scale_min(j, b.scales, &sc, &m);
        o.sc[j] = static_cast<int8_t>(sc);
        o.m[j] = m;
      }
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
          o.q[64 * c + l] = b.qs[32 * c + l] & 15;
          o.q[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
        }
      return;
    }
    case DType::Q6_K: {
      const auto& b = *reinterpret_cast<const BlockQ6_K*>(p);
      o.d = b.d;
      for (int s = 0; s < 16; ++s) o.sc[s] = b.scales[s];
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b.ql + 64 * h;
        const uint8_t* qh = b.qh + 32 * h;
        int16_t* q = o.q + 128 * h;
        for (int l = 0; l < 32; ++l) {
          q[l] = static_cast<int16_t>((ql[l] & 15) | ((qh[l] & 3) << 4));
          q[l + 32] = static_cast<int16_t>((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
          q[l + 64] = static_cast<int16_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
          q[l + 96] = static_cast<int16_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
      }
      return;
    }
    default: fail("packed weights: dtype ", dtype_name(t), " has no packed form");
  }
}

// The inverse of read_source: the ggml block bytes back from a RowBlock (every bit of these
// layouts carries data, so the round trip is exact for any block).
void write_source(DType t, const RowBlock& o, uint8_t* p) {
  switch (t) {
    case DType::Q8_0: {
      auto& b = *reinterpret_cast<BlockQ8_0*>(p);
      b.d = o.d;
      for (int i = 0; i < kQK; ++i) b.qs[i] = static_cast<int8_t>(o.q[i]);
      return;
    }
    case DType::Q4_0: {
      auto& b = *reinterpret_cast<BlockQ4_0*>(p);
      b.d = o.d;
      for (int i = 0; i < 16; ++i) b.qs[i] = static_cast<uint8_t>(o.q[i] | o.q[i + 16] << 4);
      return;
    }
    case DType::Q5_0: {
      auto& b = *reinterpret_cast<BlockQ5_0*>(p);
      b.d = o.d;
      uint32_t qh = 0;
      for (int i = 0; i < 16; ++i) {
        b.qs[i] = static_cast<uint8_t>((o.q[i] & 15) | (o.q[i + 16] & 15) << 4);
        qh |= static_cast<uint32_t>((o.q[i] >> 4) & 1) << i | static_cast<uint32_t>((o.q[i + 16] >> 4) & 1) << (i + 16);
      }
      std::memcpy(b.qh, &qh, 4);  // little-endian, as load_u32 reads it
      return;
    }
    case DType::Q4_K: {
      auto& b = *reinterpret_cast<BlockQ4_K*>(p);
      b.d = o.d;
      b.dmin = o.dmin;
      const auto sc = [&](int j) { return static_cast<uint8_t>(o.sc[j]); };
      for (int j = 0; j < 4; ++j) {  // k4_scale_min's packing, inverted
        b.scales[j] = static_cast<uint8_t>(sc(j) | (sc(j + 4) >> 4) << 6);
        b.scales[j + 4] = static_cast<uint8_t>(o.m[j] | (o.m[j + 4] >> 4) << 6);
        b.scales[j + 8] = static_cast<uint8_t>((sc(j + 4) & 15) | (o.m[j + 4] & 15) << 4);
      }
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>(o.q[64 * c + l] | o.q[64 * c + 32 + l] << 4);
      return;
    }
    case DType::Q6_K: {
      auto& b = *reinterpret_cast<BlockQ6_K*>(p);
      b.d = o.d;
      for (int s = 0; s < 16; ++s) b.scales[s] = o.sc[s];
      for (int h = 0; h < 2; ++h) {
        uint8_t* ql = b.ql + 64 * h;
        uint8_t* qh = b.qh + 32 * h;
        const int16_t* q = o.q + 128 * h;
        for (int l = 0; l < 32; ++l) {
          ql[l] = static_cast<uint8_t>((q[l] & 15) | (q[l + 64] & 15) << 4);
          ql[l + 32] = static_cast<uint8_t>((q[l + 32] & 15) | (q[l + 96] & 15) << 4);
          qh[l] = static_cast<uint8_t>((q[l] >> 4) | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
        }
      }
      return;
    }
    default: fail("packed weights: dtype ", dtype_name(t), " has no packed form");
  }
}

// One row's 32 NVFP4 elements: 16 code bytes (low nibble = even element) and 2 scale codes.
void read_source_nvfp4(const uint8_t* codes, const uint8_t* scales, RowBlock& o) {
  for (int i = 0; i < 16; ++i) {
    o.q[2 * i] = codes[i] & 15;
    o.q[2 * i + 1] = codes[i] >> 4;
  }
  o.e4m3[0] = scales[0];
  o.e4m3[1] = scales[1];
}

// Byte (r, b) of k-group g in a 32-byte register of the interleaved layout.
constexpr int lane(int g, int r, int b) { return 32 * g + 4 * r + b; }

void write_group(DType t, const RowBlock (&rb)[kGroupRows], uint8_t* out) {
  switch (t) {
    case DType::Q8_0: {
      auto& o = *reinterpret_cast<packed::GroupQ8_0*>(out);
      for (int r = 0; r < kGroupRows; ++r) {
        o.d[r] = rb[r].d;
        for (int e = 0; e < kQK; ++e) o.qs[lane(e / 4, r, e % 4)] = static_cast<int8_t>(rb[r].q[e]);
      }
      return;
    }
    case DType::Q4_0:
    case DType::Q5_0: {
      uint8_t* qs = out + 16;
      for (int r = 0; r < kGroupRows; ++r) {
        std::memcpy(out + 2 * r, &rb[r].d, 2);
        for (int e = 0; e < 16; ++e) {
          const int lo = rb[r].q[e] & 15, hi = rb[r].q[e + 16] & 15;
          qs[lane(e / 4, r, e % 4)] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      if (t == DType::Q5_0) {
        uint8_t* qh = out + 16 + 128;
        std::memset(qh, 0, 32);
        for (int r = 0; r < kGroupRows; ++r)
          for (int e = 0; e < kQK; ++e)
            qh[4 * r + e % 4] = static_cast<uint8_t>(qh[4 * r + e % 4] | ((rb[r].q[e] >> 4) << (e / 4)));
      }
      return;
    }
    case DType::Q4_K: {
      auto& o = *reinterpret_cast<packed::GroupQ4_K*>(out);
      for (int r = 0; r < kGroupRows; ++r) {
        o.d[r] = rb[r].d;
        o.dmin[r] = rb[r].dmin;
        for (int j = 0; j < 8; ++j) {
          o.sc[j][r] = static_cast<uint8_t>(rb[r].sc[j]);
          o.m[j][r] = rb[r].m[j];
        }
        for (int p = 0; p < 4; ++p)
          for (int e = 0; e < 32; ++e) {
            const int lo = rb[r].q[64 * p + e], hi = rb[r].q[64 * p + 32 + e];
            o.qs[256 * p + lane(e / 4, r, e % 4)] = static_cast<uint8_t>(lo | (hi << 4));
          }
      }
      return;
    }
    case DType::Q6_K: {
      auto& o = *reinterpret_cast<packed::GroupQ6_K*>(out);
      std::memset(o.qh, 0, sizeof(o.qh));
      for (int r = 0; r < kGroupRows; ++r) {
        o.d[r] = rb[r].d;
        for (int s = 0; s < 16; ++s) o.sc[s][r] = rb[r].sc[s];
        for (int e = 0; e < 256; ++e) {
          const int G = e / 4, b = e % 4, q = rb[r].q[e];
          uint8_t& l = o.ql[lane(G % 32, r, b)];
          l = static_cast<uint8_t>(G < 32 ? (l & 0xF0) | (q & 15) : (l & 0x0F) | ((q & 15) << 4));
          uint8_t& h = o.qh[lane(G % 16, r, b)];
          h = static_cast<uint8_t>(h | ((q >> 4) << (2 * (G / 16))));
        }
      }
      return;
    }
    case kNvfp4: {
      auto& o = *reinterpret_cast<packed::GroupNvfp4*>(out);
      for (int r = 0; r < kGroupRows; ++r) {
        o.sc[0][r] = rb[r].e4m3[0];
        o.sc[1][r] = rb[r].e4m3[1];
        for (int j = 0; j < 4; ++j)
          for (int b = 0; b < 4; ++b)
            o.qs[lane(j, r, b)] = static_cast<uint8_t>(rb[r].q[8 * j + 2 * b] | (rb[r].q[8 * j + 2 * b + 1] << 4));
      }
      return;
    }
    default: fail("packed weights: dtype ", dtype_name(t), " has no packed form");
  }
}

// The inverse of write_group (the reference reads what the kernels read).
void read_group(DType t, const uint8_t* in, RowBlock (&rb)[kGroupRows]) {
  switch (t) {
    case DType::Q8_0: {
      const auto& g = *reinterpret_cast<const packed::GroupQ8_0*>(in);
      for (int r = 0; r < kGroupRows; ++r) {
        rb[r].d = g.d[r];
        for (int e = 0; e < kQK; ++e) rb[r].q[e] = g.qs[lane(e / 4, r, e % 4)];
      }
      return;
    }
    case DType::Q4_0:
    case DType::Q5_0: {
      const uint8_t* qs = in + 16;
      for (int r = 0; r < kGroupRows; ++r) {
        std::memcpy(&rb[r].d, in + 2 * r, 2);
        for (int e = 0; e < 16; ++e) {
          const uint8_t v = qs[lane(e / 4, r, e % 4)];
          rb[r].q[e] = v & 15;
          rb[r].q[e + 16] = v >> 4;
        }
        if (t == DType::Q5_0)
          for (int e = 0; e < kQK; ++e)
            rb[r].q[e] = static_cast<int16_t>(rb[r].q[e] | (((in[16 + 128 + 4 * r + e % 4] >> (e / 4)) & 1) << 4));
      }
      return;
    }
    case DType::Q4_K: {
      const auto& g = *reinterpret_cast<const packed::GroupQ4_K*>(in);
      for (int r = 0; r < kGroupRows; ++r) {
        rb[r].d = g.d[r];
        rb[r].dmin = g.dmin[r];
        for (int j = 0; j < 8; ++j) {
          rb[r].sc[j] = static_cast<int8_t>(g.sc[j][r]);
          rb[r].m[j] = g.m[j][r];
        }
        for (int p = 0; p < 4; ++p)
          for (int e = 0; e < 32; ++e) {
            const uint8_t v = g.qs[256 * p + lane(e / 4, r, e % 4)];
            rb[r].q[64 * p + e] = v & 15;
            rb[r].q[64 * p + 32 + e] = v >> 4;
          }
      }
      return;
    }
    case DType::Q6_K: {
      const auto& g = *reinterpret_cast<const packed::GroupQ6_K*>(in);
      for (int r = 0; r < kGroupRows; ++r) {
        rb[r].d = g.d[r];
        for (int s = 0; s < 16; ++s) rb[r].sc[s] = g.sc[s][r];
        for (int e = 0; e < 256; ++e) {
          const int G = e / 4, b = e % 4;
          const uint8_t l = g.ql[lane(G % 32, r, b)];
          const int low = G < 32 ? (l & 15) : (l >> 4);
          const int high = (g.qh[lane(G % 16, r, b)] >> (2 * (G / 16))) & 3;
          rb[r].q[e] = static_cast<int16_t>(low | (high << 4));
        }
      }
      return;
    }
    case kNvfp4: {
      const auto& g = *reinterpret_cast<const packed::GroupNvfp4*>(in);
      for (int r = 0; r < kGroupRows; ++r) {
        rb[r].e4m3[0] = g.sc[0][r];
        rb[r].e4m3[1] = g.sc[1][r];
        for (int j = 0; j < 4; ++j)
          for (int b = 0; b < 4; ++b) {
            const uint8_t v = g.qs[lane(j, r, b)];
            rb[r].q[8 * j + 2 * b] = v & 15;
            rb[r].q[8 * j + 2 * b + 1] = v >> 4;
          }
      }
      return;
    }
    default: fail("packed weights: dtype ", dtype_name(t), " has no packed form");
  }
}

// The same bytes as write_group(read_source(...)) without going through RowBlock: most
// layouts move whole 4-byte k-groups (Q4_0's and Q4_K's interleaved bytes are the source's
// bytes, only reordered). src[r] is row r's source block, nullptr for a padding row.
void pack_block(DType t, const uint8_t* const (&src)[kGroupRows], uint8_t* out) {
  std::memset(out, 0, group_block_bytes(t));
  for (int r = 0; r < kGroupRows; ++r) {
    if (src[r] == nullptr) continue;
    switch (t) {
      case DType::Q8_0: {
        const auto& b = *reinterpret_cast<const BlockQ8_0*>(src[r]);
        auto& o = *reinterpret_cast<packed::GroupQ8_0*>(out);
        o.d[r] = b.d;
        for (int g = 0; g < 8; ++g) std::memcpy(o.qs + lane(g, r, 0), b.qs + 4 * g, 4);
        break;
      }
      case DType::Q4_0: {
        const auto& b = *reinterpret_cast<const BlockQ4_0*>(src[r]);
        auto& o = *reinterpret_cast<packed::GroupQ4_0*>(out);
        o.d[r] = b.d;
        for (int j = 0; j < 4; ++j) std::memcpy(o.qs + lane(j, r, 0), b.qs + 4 * j, 4);
        break;
      }
      case DType::Q5_0: {
        const auto& b = *reinterpret_cast<const BlockQ5_0*>(src[r]);
        auto& o = *reinterpret_cast<packed::GroupQ5_0*>(out);
        o.d[r] = b.d;
        for (int j = 0; j < 4; ++j) std::memcpy(o.qs + lane(j, r, 0), b.qs + 4 * j, 4);
        const uint32_t qh = load_u32(b.qh);
        for (int c = 0; c < 4; ++c) {
          uint32_t bits = 0;
          for (int g = 0; g < 8; ++g) bits |= ((qh >> (4 * g + c)) & 1u) << g;
          o.qh[4 * r + c] = static_cast<uint8_t>(bits);
        }
        break;
      }
      case DType::Q4_K: {
        const auto& b = *reinterpret_cast<const BlockQ4_K*>(src[r]);
        auto& o = *reinterpret_cast<packed::GroupQ4_K*>(out);
        o.d[r] = b.d;
        o.dmin[r] = b.dmin;
        for (int j = 0; j < 8; ++j) k4_scale_min(j, b.scales, &o.sc[j][r], &o.m[j][r]);
        for (int p = 0; p < 4; ++p)
          for (int g = 0; g < 8; ++g) std::memcpy(o.qs + 256 * p + lane(g, r, 0), b.qs + 32 * p + 4 * g, 4);
        break;
      }
      case DType::Q6_K: {
        RowBlock rb;
        read_source(t, src[r], rb);
        auto& o = *reinterpret_cast<packed::GroupQ6_K*>(out);
        o.d[r] = rb.d;
        for (int s = 0; s < 16; ++s) o.sc[s][r] = rb.sc[s];
        for (int i = 0; i < 32; ++i)
          for (int c = 0; c < 4; ++c)
            o.ql[lane(i, r, c)] = static_cast<uint8_t>((rb.q[4 * i + c] & 15) | ((rb.q[4 * (i + 32) + c] & 15) << 4));
        for (int j = 0; j < 16; ++j)
          for (int c = 0; c < 4; ++c) {
            int v = 0;
            for (int m = 0; m < 4; ++m) v |= (rb.q[4 * (j + 16 * m) + c] >> 4) << (2 * m);
            o.qh[lane(j, r, c)] = static_cast<uint8_t>(v);
          }
        break;
      }
      default: fail("packed weights: dtype ", dtype_name(t), " has no packed form");
    }
  }
}

// NVFP4's bytes move as they are, 4 at a time (the activations are reordered to match).
// codes[r] / scales[r]: row r's 16 code bytes and 2 scale codes, nullptr for a padding row.
void pack_block_nvfp4(const uint8_t* const (&codes)[kGroupRows], const uint8_t* const (&scales)[kGroupRows],
                      uint8_t* out) {
  auto& o = *reinterpret_cast<packed::GroupNvfp4*>(out);
  std::memset(out, 0, sizeof(o));
  for (int r = 0; r < kGroupRows; ++r) {
    if (codes[r] == nullptr) continue;
    o.sc[0][r] = scales[r][0];
    o.sc[1][r] = scales[r][1];
    for (int j = 0; j < 4; ++j) std::memcpy(o.qs + lane(j, r, 0), codes[r] + 4 * j, 4);
  }
}

// --- activations ----------------------------------------------------------------------------

bool is_kquant(DType t) { return t == DType::Q4_K || t == DType::Q6_K; }

size_t act_block_bytes(DType t) {
  return is_kquant(t) ? sizeof(ActQ8K) : t == kNvfp4 ? sizeof(ActNvfp4) : sizeof(ActQ8);
}

// The unsigned offset of a 32-element format's stored quants (value = q - offset).
int32_t quant_offset(DType t) { return t == DType::Q4_0 ? 8 : t == DType::Q5_0 ? 16 : 0; }

// One activation row (k elements) in the packed kernels' format.
void quantize_act_row(DType t, const float* x, int64_t k, uint8_t* out) {
  const int64_t nb = k / block_elems(t);
  if (is_kquant(t)) {
    thread_local std::vector<BlockQ8_K> q;
    q.resize(static_cast<size_t>(nb));
    quantize_activation(DType::Q4_K, x, q.data(), k);
    auto* a = reinterpret_cast<ActQ8K*>(out);
    for (int64_t i = 0; i < nb; ++i) {
      a[i].d = q[i].d;
      std::memcpy(a[i].bsums, q[i].bsums, sizeof(a[i].bsums));
      for (int j = 0; j < 8; ++j) a[i].sums32[j] = static_cast<int16_t>(q[i].bsums[2 * j] + q[i].bsums[2 * j + 1]);
      std::memcpy(a[i].qs, q[i].qs, sizeof(a[i].qs));
    }
  } else if (t == kNvfp4) {
    thread_local std::vector<BlockQ8_0> q;
    q.resize(static_cast<size_t>(nb));
    quantize_activation(DType::Q8_0, x, q.data(), k);
    auto* a = reinterpret_cast<ActNvfp4*>(out);
    for (int64_t i = 0; i < nb; ++i) {
      a[i].d = f16_to_f32(q[i].d);
      for (int h = 0; h < 2; ++h) {
        int32_t sum = 0;
        for (int e = 16 * h; e < 16 * h + 16; ++e) sum += q[i].qs[e];
        a[i].offset_sums[h] = packed::kNvfp4LutOffset * sum;
      }
      for (int e = 0; e < kQK; ++e) a[i].qs[packed::nvfp4_act_pos(e)] = q[i].qs[e];
    }
  } else {
    thread_local std::vector<BlockQ8_0> q;
    q.resize(static_cast<size_t>(nb));
    quantize_activation(DType::Q8_0, x, q.data(), k);
    auto* a = reinterpret_cast<ActQ8*>(out);
    for (int64_t i = 0; i < nb; ++i) {
      a[i].d = f16_to_f32(q[i].d);
      int32_t sum = 0;
      for (int e = 0; e < kQK; ++e) sum += q[i].qs[e];
      a[i].offset_sum = quant_offset(t) * sum;
      std::memcpy(a[i].qs, q[i].qs, sizeof(a[i].qs));
    }
  }
}

// Quantizes T activation rows into the calling thread's scratch; returns it. With a pool,
// the rows are shared out (a batch's rows otherwise run on one thread while the rest wait).
const uint8_t* quantize_acts(DType t, const float* x, int64_t n_tokens, int64_t k, ThreadPool* pool = nullptr) {
  thread_local std::vector<uint8_t> scratch;
  const size_t row = static_cast<size_t>(k / block_elems(t)) * act_block_bytes(t);
  if (scratch.size() < row * static_cast<size_t>(n_tokens)) scratch.resize(row * static_cast<size_t>(n_tokens));
  uint8_t* out = scratch.data();
  const auto rows = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) quantize_act_row(t, x + i * k, k, out + static_cast<size_t>(i) * row);
  };
  if (pool != nullptr && pool->size() > 1 && n_tokens >= 4) pool->parallel_for(n_tokens, rows);
  else rows(0, n_tokens, 0);
  return out;
}

// --- scalar reference -------------------------------------------------------------------------

// acc += one block of one (row, token), as every kernel does it.
float ref_block(DType t, const RowBlock& w, const uint8_t* act, float acc) {
  const float dw = f16_to_f32(w.d);
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0: {
      const auto& a = *reinterpret_cast<const ActQ8*>(act);
      int32_t isum = 0;
      for (int e = 0; e < kQK; ++e) isum += w.q[e] * a.qs[e];
      isum -= a.offset_sum;  // quant_offset(t) x the sum of the activation quants
      return std::fma(dw * a.d, static_cast<float>(isum), acc);
    }
    case DType::Q4_K: {
      const auto& a = *reinterpret_cast<const ActQ8K*>(act);
      int32_t isum = 0, msum = 0;
      for (int j = 0; j < 8; ++j) {
        int32_t s = 0;
        for (int e = 32 * j; e < 32 * j + 32; ++e) s += w.q[e] * a.qs[e];
        isum += w.sc[j] * s;
        msum += w.m[j] * a.sums32[j];
      }
      acc = std::fma(dw * a.d, static_cast<float>(isum), acc);
      return std::fma(-(f16_to_f32(w.dmin) * a.d), static_cast<float>(msum), acc);
    }
    case DType::Q6_K: {
      const auto& a = *reinterpret_cast<const ActQ8K*>(act);
      int32_t isum = 0, bias = 0;
      for (int s = 0; s < 16; ++s) {
        int32_t v = 0;
        for (int e = 16 * s; e < 16 * s + 16; ++e) v += w.q[e] * a.qs[e];
        isum += w.sc[s] * v;
        bias += w.sc[s] * a.bsums[s];
      }
      return std::fma(dw * a.d, static_cast<float>(isum - 32 * bias), acc);
    }
    case kNvfp4: {
      const auto& a = *reinterpret_cast<const ActNvfp4*>(act);
      float f[2], sc[2];
      for (int h = 0; h < 2; ++h) {
        int32_t isum = 0;  // the kernels' (2 e2m1 + offset) * a - offset * sum(a), the same integer
        for (int e = 16 * h; e < 16 * h + 16; ++e)
          isum += static_cast<int32_t>(2.0f * e2m1_to_f32(static_cast<uint8_t>(w.q[e]))) * a.qs[packed::nvfp4_act_pos(e)];
        f[h] = static_cast<float>(isum);
        sc[h] = e4m3_to_f32(w.e4m3[h]) * 0x1p-8f;  // exact
      }
      return std::fma(a.d, std::fma(sc[0], f[0], sc[1] * f[1]), acc);
    }
    default: fail("packed weights: dtype ", dtype_name(t), " has no packed form");
  }
}

}  // namespace

bool PackedMatrix::supports(DType dtype) {
  switch (dtype) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q4_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

bool PackedMatrix::available() { return use_avx2(); }

const char* PackedMatrix::isa() {
#if ZEN_HAVE_X86_SIMD
  if (available()) return packed_isa_name();
#endif
  return "none";
}

#if ZEN_HAVE_X86_SIMD
namespace {

struct PackedIsa {
  const char* name;
  PackedGroupsFn fn;
};

// The best kernels the CPU has, unless ZEN_PACKED_ISA names another it has.
PackedIsa choose_packed_isa() {
  static const char* const kPreference[] = {"avx512vnni", "avxvnni", "avx2"};
  if (const char* want = std::getenv("ZEN_PACKED_ISA"); want != nullptr && *want != 0) {
    ZEN_CHECK(packed_groups_for(want) != nullptr, "ZEN_PACKED_ISA=", want, ": expected avx2, avxvnni or avx512vnni");
    ZEN_CHECK(packed_isa_supported(want), "ZEN_PACKED_ISA=", want, ": this CPU does not have it");
    return {want, packed_groups_for(want)};
  }
  for (const char* isa : kPreference)
    if (packed_isa_supported(isa)) return {isa, packed_groups_for(isa)};
  return {"avx2", avx2::packed_groups};
}

const PackedIsa& packed_isa() {
  static const PackedIsa isa = choose_packed_isa();
  return isa;
}

}  // namespace

bool packed_isa_supported(const char* isa) {
  const X86Features& f = x86_features();
  if (std::strcmp(isa, "avx512vnni") == 0) return f.avx512vnni && f.avx512vl && f.avx512bw;
  if (std::strcmp(isa, "avxvnni") == 0) return f.avxvnni;
  return std::strcmp(isa, "avx2") == 0 && use_avx2();
}

PackedGroupsFn packed_groups_for(const char* isa) {
  if (std::strcmp(isa, "avx2") == 0) return avx2::packed_groups;
  if (std::strcmp(isa, "avxvnni") == 0) return avxvnni::packed_groups;
  if (std::strcmp(isa, "avx512vnni") == 0) return avx512vnni::packed_groups;
  return nullptr;
}
PackedGroupsFn packed_groups_for_cpu() { return packed_isa().fn; }
const char* packed_isa_name() { return packed_isa().name; }
#endif

template <typename PackBlock>
PackedMatrix PackedMatrix::pack_with(DType dtype, int64_t rows, int64_t k, const PackBlock& pack_block) {
  PackedMatrix p;
  p.dtype_ = dtype;
  p.rows_ = rows;
  p.k_ = k;
  const int64_t nb = k / block_elems(dtype);
  const size_t block_bytes = group_block_bytes(dtype);
  p.n_groups_ = static_cast<size_t>((rows + kGroupRows - 1) / kGroupRows);
  p.group_bytes_ = static_cast<size_t>(nb) * block_bytes;
  p.data_ = std::make_unique<uint8_t[]>(p.n_groups_ * p.group_bytes_);
  auto pack_groups = [&](size_t g0, size_t g1) {
    for (size_t g = g0; g < g1; ++g)
      for (int64_t i = 0; i < nb; ++i)
        pack_block(static_cast<int64_t>(g), i, p.data_.get() + g * p.group_bytes_ + static_cast<size_t>(i) * block_bytes);
  };
  // Large matrices (embeddings, MLPs) pack on every core: loading is otherwise bound by this.
  const size_t threads = p.bytes() < (size_t{1} << 20) ? 1 : std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::thread> workers;
  for (size_t i = 1; i < threads; ++i)
    workers.emplace_back(pack_groups, p.n_groups_ * i / threads, p.n_groups_ * (i + 1) / threads);
  pack_groups(0, p.n_groups_ / threads);
  for (auto& t : workers) t.join();
  return p;
}

namespace {

// A validated TensorView source: at(row, i) is block i of `row`, nullptr past the last row.
struct SourceBlocks {
  const TensorView& w;
  size_t row_bytes = 0, block_bytes = 0;
  explicit SourceBlocks(const TensorView& t) : w(t) {
    if (!PackedMatrix::supports(w.dtype))
      fail("packed weights: '", w.name, "' has dtype ", dtype_name(w.dtype), ", which has no packed form");
    row_bytes = dtype_row_bytes(w.dtype, w.cols());
    if (w.data == nullptr || w.nbytes < static_cast<size_t>(w.rows()) * row_bytes)
      fail("packed weights: '", w.name, "' ", w.shape_str(), " holds ", w.nbytes, " bytes, fewer than its shape needs");
    block_bytes = row_bytes / static_cast<size_t>(w.cols() / block_elems(w.dtype));
  }
  const uint8_t* at(int64_t row, int64_t i) const {
    return row < w.rows() ? w.data + static_cast<size_t>(row) * row_bytes + static_cast<size_t>(i) * block_bytes : nullptr;
  }
};

void check_nvfp4(const Nvfp4Matrix& w, const std::string& name) {
  if (!PackedMatrix::nvfp4_packable(w) || w.rows <= 0 || w.data == nullptr || w.scales == nullptr)
    fail("packed weights: NVFP4 '", name, "' [", w.rows, ", ", w.cols, "] needs a multiple of 32 columns");
  const size_t n_scales = static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols / kNvfp4GroupSize);
  for (size_t i = 0; i < n_scales; ++i)
    if ((w.scales[i] & 0x7F) == 0x7F)
      fail("packed weights: NVFP4 '", name, "' has a NaN E4M3 scale (code 0x", std::hex, int{w.scales[i]}, std::dec,
           ") for row ", i / static_cast<size_t>(w.cols / kNvfp4GroupSize));
}

// Row `row`'s source bytes for block i of an NVFP4 matrix (nullptr past the last row).
const uint8_t* nvfp4_codes(const Nvfp4Matrix& w, int64_t row, int64_t i) {
  return row < w.rows ? w.data + static_cast<size_t>(row) * static_cast<size_t>(w.cols / 2) + static_cast<size_t>(16 * i)
                      : nullptr;
}
const uint8_t* nvfp4_scales(const Nvfp4Matrix& w, int64_t row, int64_t i) {
  return row < w.rows ? w.scales + static_cast<size_t>(row) * static_cast<size_t>(w.cols / kNvfp4GroupSize) +
                            static_cast<size_t>(2 * i)
                      : nullptr;
}

// The kernels' factors: codes doubled, scales times 2^-8; the finished sums get both back.
float nvfp4_out_scale(const Nvfp4Matrix& w) { return w.global_scale * 128.0f; }

}  // namespace

PackedMatrix PackedMatrix::pack(const TensorView& w) {
  const SourceBlocks src(w);
  return pack_with(w.dtype, w.rows(), w.cols(), [&](int64_t g, int64_t i, uint8_t* out) {
    const uint8_t* blocks[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) blocks[r] = src.at(g * kGroupRows + r, i);
    pack_block(w.dtype, blocks, out);
  });
}

PackedMatrix PackedMatrix::pack_reference(const TensorView& w) {
  const SourceBlocks src(w);
  return pack_with(w.dtype, w.rows(), w.cols(), [&](int64_t g, int64_t i, uint8_t* out) {
    RowBlock rb[kGroupRows];  // padding rows: zero scale, zero quants
    for (int r = 0; r < kGroupRows; ++r)
      if (const uint8_t* block = src.at(g * kGroupRows + r, i)) read_source(w.dtype, block, rb[r]);
    write_group(w.dtype, rb, out);
  });
}

PackedMatrix PackedMatrix::pack_nvfp4(const Nvfp4Matrix& w, const std::string& name) {
  check_nvfp4(w, name);
  PackedMatrix p = pack_with(kNvfp4, w.rows, w.cols, [&](int64_t g, int64_t i, uint8_t* out) {
    const uint8_t* codes[kGroupRows];
    const uint8_t* scales[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      codes[r] = nvfp4_codes(w, g * kGroupRows + r, i);
      scales[r] = nvfp4_scales(w, g * kGroupRows + r, i);
    }
    pack_block_nvfp4(codes, scales, out);
  });
  p.out_scale_ = nvfp4_out_scale(w);
  return p;
}

PackedMatrix PackedMatrix::pack_nvfp4_reference(const Nvfp4Matrix& w, const std::string& name) {
  check_nvfp4(w, name);
  PackedMatrix p = pack_with(kNvfp4, w.rows, w.cols, [&](int64_t g, int64_t i, uint8_t* out) {
    RowBlock rb[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r)
      if (const uint8_t* codes = nvfp4_codes(w, g * kGroupRows + r, i))
        read_source_nvfp4(codes, nvfp4_scales(w, g * kGroupRows + r, i), rb[r]);
    write_group(kNvfp4, rb, out);
  });
  p.out_scale_ = nvfp4_out_scale(w);
  return p;
}

void PackedMatrix::matmul_reference(const float* x, int64_t n_tokens, float* y) const {
  const int64_t nb = k_ / block_elems(dtype_);
  const size_t act_row = static_cast<size_t>(nb) * act_block_bytes(dtype_);
  const uint8_t* act = quantize_acts(dtype_, x, n_tokens, k_);
  std::vector<float> acc(static_cast<size_t>(n_tokens) * kGroupRows);
  RowBlock rb[kGroupRows];
  for (size_t g = 0; g < n_groups_; ++g) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t i = 0; i < nb; ++i) {
      read_group(dtype_, data_.get() + g * group_bytes_ + static_cast<size_t>(i) * group_block_bytes(dtype_), rb);
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int r = 0; r < kGroupRows; ++r) {
          float& a = acc[static_cast<size_t>(t) * kGroupRows + r];
          a = ref_block(dtype_, rb[r], act + static_cast<size_t>(t) * act_row + static_cast<size_t>(i) * act_block_bytes(dtype_), a);
        }
    }
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int r = 0; r < kGroupRows; ++r) {
        const int64_t row = static_cast<int64_t>(g) * kGroupRows + r;
        if (row < rows_) y[t * rows_ + row] = acc[static_cast<size_t>(t) * kGroupRows + r] * out_scale_;
      }
  }
}

void PackedMatrix::dequantize_row(int64_t row, float* out) const {
  ZEN_CHECK(row >= 0 && row < rows_, "packed dequantize_row: row ", row, " of ", rows_);
  ZEN_CHECK(dtype_ != kNvfp4, "packed dequantize_row: NVFP4 rows are read from the checkpoint");
  const int be = block_elems(dtype_);
  const size_t g = static_cast<size_t>(row / kGroupRows);
  const int r = static_cast<int>(row % kGroupRows);
  RowBlock rb[kGroupRows];
  alignas(8) uint8_t block[sizeof(BlockQ6_K)];  // the largest source block
  for (int64_t i = 0; i < k_ / be; ++i) {
    read_group(dtype_, data_.get() + g * group_bytes_ + static_cast<size_t>(i) * group_block_bytes(dtype_), rb);
    write_source(dtype_, rb[r], block);
    kernels::dequantize_row(dtype_, block, out + i * be, be);
  }
}

#if ZEN_HAVE_X86_SIMD
avx2::PackedProblem PackedMatrix::problem(const float* x, int64_t n_tokens, float* y, ThreadPool* pool) const {
  avx2::PackedProblem p;
  p.dtype = dtype_;
  p.weights = data_.get();
  p.group_bytes = group_bytes_;
  p.n_groups = static_cast<int64_t>(n_groups_);
  p.n_blocks = k_ / block_elems(dtype_);
  p.act = quantize_acts(dtype_, x, n_tokens, k_, pool);
  p.act_row_bytes = static_cast<size_t>(p.n_blocks) * act_block_bytes(dtype_);
  p.n_tokens = n_tokens;
  p.n_rows = rows_;
  p.y = y;
  p.out_scale = out_scale_;
  return p;
}
#endif

void PackedMatrix::matmul(const float* x, int64_t n_tokens, float* y, [[maybe_unused]] ThreadPool& pool) const {
  if (n_tokens <= 0) return;
  if (!available()) return matmul_reference(x, n_tokens, y);
#if ZEN_HAVE_X86_SIMD
  // Small problems run inline: waking the pool costs more than the work.
  const bool inline_run = bytes() * static_cast<size_t>(n_tokens) < (size_t{64} << 10);
  const avx2::PackedProblem p = problem(x, n_tokens, y, inline_run ? nullptr : &pool);
  const PackedGroupsFn run = packed_groups_for_cpu();
  if (inline_run) return run(p, 0, p.n_groups);
  // Chunks of about an eighth of a thread's share (even, so AVX-512 keeps its group pairs),
  // handed out as threads come free: a group's result is the same whoever computes it.
  const int64_t chunk = (std::max<int64_t>(1, p.n_groups / (8 * pool.size())) + 1) / 2 * 2;
  pool.parallel_chunks(p.n_groups, [&p, run](int64_t g0, int64_t g1, int) { run(p, g0, g1); }, chunk);
#endif
}

}  // namespace zen::kernels
