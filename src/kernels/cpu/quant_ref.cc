// Scalar references for the block formats: activation quantizers, dequantizers and dot
// products. Plain loops, integer sums per block, one float multiply-add per block; these are
// what the SIMD paths are tested against and the fallback on CPUs without AVX2.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"

namespace zen::kernels::ref {
namespace {

// Round half to even for |v| < 2^22 without depending on the FP rounding mode being queried
// (ggml's nearest_int): adding 1.5*2^23 leaves the rounded integer in the low mantissa bits.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

inline int8_t clamp_i8(int v) { return static_cast<int8_t>(std::clamp(v, -128, 127)); }

float block_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

// One Q8_0/Q8_1 activation block: d = amax/127, q = round-half-even(x * 127/amax). Returns d
// and the integer sum of the quants.
float quantize_block_q8(const float* x, int8_t* qs, int* sum) {
  const float amax = block_amax(x, kQK);
  const float d = amax / 127.f;
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  int s = 0;
  for (int j = 0; j < kQK; ++j) {
    qs[j] = clamp_i8(nearest_int(x[j] * id));
    s += qs[j];
  }
  *sum = s;
  return d;
}

// --- integer values of one block (before scaling) ----------------------------------------

void values_q4_0(const BlockQ4_0& b, int8_t v[32]) {
  for (int j = 0; j < 16; ++j) {
    v[j] = static_cast<int8_t>((b.qs[j] & 0xF) - 8);
    v[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
  }
}

void values_q4_1(const BlockQ4_1& b, int8_t v[32]) {
  for (int j = 0; j < 16; ++j) {
    v[j] = static_cast<int8_t>(b.qs[j] & 0xF);
    v[j + 16] = static_cast<int8_t>(b.qs[j] >> 4);
  }
}

// 5-bit values (0..31) from low nibbles and the qh bit mask.
void values_5bit(const uint8_t* qs, const uint8_t* qh_bytes, int8_t v[32]) {
  const uint32_t qh = load_u32(qh_bytes);
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
    v[j] = static_cast<int8_t>((qs[j] & 0xF) | h0);
    v[j + 16] = static_cast<int8_t>((qs[j] >> 4) | h1);
  }
}

void values_q5_0(const BlockQ5_0& b, int8_t v[32]) {
  values_5bit(b.qs, b.qh, v);
  for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(v[j] - 16);
}

void values_q5_1(const BlockQ5_1& b, int8_t v[32]) { values_5bit(b.qs, b.qh, v); }

// Q4_K / Q5_K quants (0..15 / 0..31) in element order.
void values_q4_k(const BlockQ4_K& b, uint8_t v[256]) {
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = b.qs + 32 * c;
    for (int l = 0; l < 32; ++l) {
      v[64 * c + l] = q[l] & 0xF;
      v[64 * c + 32 + l] = q[l] >> 4;
    }
  }
}

void values_q5_k(const BlockQ5_K& b, uint8_t v[256]) {
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = b.qs + 32 * c;
    for (int l = 0; l < 32; ++l) {
      const int lo_bit = (b.qh[l] >> (2 * c)) & 1;
      const int hi_bit = (b.qh[l] >> (2 * c + 1)) & 1;
      v[64 * c + l] = static_cast<uint8_t>((q[l] & 0xF) | (lo_bit << 4));
      v[64 * c + 32 + l] = static_cast<uint8_t>((q[l] >> 4) | (hi_bit << 4));
    }
  }
}

// Q6_K values (q - 32, in -32..31) in element order.
void values_q6_k(const BlockQ6_K& b, int8_t v[256]) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    int8_t* out = v + 128 * h;
    for (int l = 0; l < 32; ++l) {
      out[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

template <typename A, typename B>
int int_dot(const A* a, const B* b, int n) {
  int s = 0;
  for (int j = 0; j < n; ++j) s += static_cast<int>(a[j]) * static_cast<int>(b[j]);
  return s;
}

// --- dot products --------------------------------------------------------------------------

template <typename Block, void (*Values)(const Block&, int8_t*)>
float dot_symmetric_q8_0(const void* wrow, const void* act, int64_t n) {
  const auto* x = static_cast<const Block*>(wrow);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  int8_t v[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    Values(x[i], v);
    const int sumi = int_dot(v, y[i].qs, kQK);
    sum += (fp16(x[i].d) * fp16(y[i].d)) * static_cast<float>(sumi);
  }
  return sum;
}

template <typename Block, void (*Values)(const Block&, int8_t*)>
float dot_offset_q8_1(const void* wrow, const void* act, int64_t n) {
  const auto* x = static_cast<const Block*>(wrow);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  float sum = 0.0f;
  int8_t v[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    Values(x[i], v);
    const int sumi = int_dot(v, y[i].qs, kQK);
    sum += (fp16(x[i].d) * fp16(y[i].d)) * static_cast<float>(sumi) + fp16(x[i].m) * fp16(y[i].s);
  }
  return sum;
}

void values_q8_0(const BlockQ8_0& b, int8_t v[32]) { std::memcpy(v, b.qs, 32); }

// Shared by Q4_K and Q5_K: sum_s d*sc[s]*<q_s, y_s> - dmin*m[s]*sum(y_s).
float dot_k4_block(const uint8_t* v, uint16_t d, uint16_t dmin, const uint8_t* packed_scales,
                   const BlockQ8_K& y) {
  uint8_t sc[8], m[8];
  k4_unpack_scales(packed_scales, sc, m);
  int isum = 0, msum = 0;
  for (int s = 0; s < 8; ++s) {
    isum += sc[s] * int_dot(v + 32 * s, y.qs + 32 * s, 32);
    msum += m[s] * (y.bsums[2 * s] + y.bsums[2 * s + 1]);
  }
  return fp16(d) * y.d * static_cast<float>(isum) - fp16(dmin) * y.d * static_cast<float>(msum);
}

float dot_q4_k(const void* wrow, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(wrow);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  uint8_t v[256];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    values_q4_k(x[i], v);
    sum += dot_k4_block(v, x[i].d, x[i].dmin, x[i].scales, y[i]);
  }
  return sum;
}

float dot_q5_k(const void* wrow, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(wrow);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  uint8_t v[256];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    values_q5_k(x[i], v);
    sum += dot_k4_block(v, x[i].d, x[i].dmin, x[i].scales, y[i]);
  }
  return sum;
}

float dot_q6_k(const void* wrow, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(wrow);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  int8_t v[256];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    values_q6_k(x[i], v);
    int isum = 0;
    for (int s = 0; s < 16; ++s) isum += x[i].scales[s] * int_dot(v + 16 * s, y[i].qs + 16 * s, 16);
    sum += fp16(x[i].d) * y[i].d * static_cast<float>(isum);
  }
  return sum;
}

template <float (*Widen)(uint16_t)>
float dot_half(const void* wrow, const void* act, int64_t n) {
  const auto* w = static_cast<const uint16_t*>(wrow);
  const auto* x = static_cast<const float*>(act);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += Widen(w[j]) * x[j];
  return sum;
}

float dot_f32(const void* wrow, const void* act, int64_t n) {
  const auto* w = static_cast<const float*>(wrow);
  const auto* x = static_cast<const float*>(act);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += w[j] * x[j];
  return sum;
}

// --- dequantization --------------------------------------------------------------------------

template <typename Block, void (*Values)(const Block&, int8_t*)>
void dequant_symmetric(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  int8_t v[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    Values(x[i], v);
    const float d = fp16(x[i].d);
    for (int j = 0; j < kQK; ++j) y[kQK * i + j] = static_cast<float>(v[j]) * d;
  }
}

template <typename Block, void (*Values)(const Block&, int8_t*)>
void dequant_offset(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  int8_t v[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    Values(x[i], v);
    const float d = fp16(x[i].d), m = fp16(x[i].m);
    for (int j = 0; j < kQK; ++j) y[kQK * i + j] = static_cast<float>(v[j]) * d + m;
  }
}

template <typename Block, void (*Values)(const Block&, uint8_t*)>
void dequant_k4(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  uint8_t v[256], sc[8], m[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    Values(x[i], v);
    k4_unpack_scales(x[i].scales, sc, m);
    const float d = fp16(x[i].d), dmin = fp16(x[i].dmin);
    for (int s = 0; s < 8; ++s) {
      const float ds = d * static_cast<float>(sc[s]);
      const float ms = dmin * static_cast<float>(m[s]);
      for (int l = 0; l < 32; ++l) y[kQKK * i + 32 * s + l] = ds * static_cast<float>(v[32 * s + l]) - ms;
    }
  }
}

void dequant_q6_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  int8_t v[256];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    values_q6_k(x[i], v);
    const float d = fp16(x[i].d);
    for (int e = 0; e < kQKK; ++e)
      y[kQKK * i + e] = d * static_cast<float>(x[i].scales[e / 16]) * static_cast<float>(v[e]);
  }
}

void check_row(DType t, int64_t n) {
  const int64_t be = dtype_block_elems(t);
  if (n < 0 || n % be != 0)
    fail("row of ", n, " elements is not a multiple of the ", dtype_name(t), " block size ", be);
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
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) y[i].qs[j] = clamp_i8(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

void quantize_weight_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + kQK * i;
    const float d = block_amax(xb, kQK) / 127.f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = clamp_i8(static_cast<int>(std::round(xb[j] * id)));
  }
}

float vec_dot(DType weight, const void* wrow, const void* act, int64_t n) {
  check_row(weight, n);
  switch (weight) {
    case DType::F32: return dot_f32(wrow, act, n);
    case DType::F16: return dot_half<f16_to_f32>(wrow, act, n);
    case DType::BF16: return dot_half<bf16_to_f32>(wrow, act, n);
    case DType::Q4_0: return dot_symmetric_q8_0<BlockQ4_0, values_q4_0>(wrow, act, n);
    case DType::Q5_0: return dot_symmetric_q8_0<BlockQ5_0, values_q5_0>(wrow, act, n);
    case DType::Q8_0: return dot_symmetric_q8_0<BlockQ8_0, values_q8_0>(wrow, act, n);
    case DType::Q4_1: return dot_offset_q8_1<BlockQ4_1, values_q4_1>(wrow, act, n);
    case DType::Q5_1: return dot_offset_q8_1<BlockQ5_1, values_q5_1>(wrow, act, n);
    case DType::Q4_K: return dot_q4_k(wrow, act, n);
    case DType::Q5_K: return dot_q5_k(wrow, act, n);
    case DType::Q6_K: return dot_q6_k(wrow, act, n);
    default: fail("vec_dot: weight dtype ", dtype_name(weight), " is not supported");
  }
}

void dequantize_row(DType weight, const void* wrow, float* out, int64_t n) {
  check_row(weight, n);
  switch (weight) {
    case DType::F32: std::memcpy(out, wrow, static_cast<size_t>(n) * 4); return;
    case DType::F16: {
      const auto* w = static_cast<const uint16_t*>(wrow);
      for (int64_t j = 0; j < n; ++j) out[j] = f16_to_f32(w[j]);
      return;
    }
    case DType::BF16: {
      const auto* w = static_cast<const uint16_t*>(wrow);
      for (int64_t j = 0; j < n; ++j) out[j] = bf16_to_f32(w[j]);
      return;
    }
    case DType::Q4_0: return dequant_symmetric<BlockQ4_0, values_q4_0>(wrow, out, n);
    case DType::Q5_0: return dequant_symmetric<BlockQ5_0, values_q5_0>(wrow, out, n);
    case DType::Q8_0: return dequant_symmetric<BlockQ8_0, values_q8_0>(wrow, out, n);
    case DType::Q4_1: return dequant_offset<BlockQ4_1, values_q4_1>(wrow, out, n);
    case DType::Q5_1: return dequant_offset<BlockQ5_1, values_q5_1>(wrow, out, n);
    case DType::Q4_K: return dequant_k4<BlockQ4_K, values_q4_k>(wrow, out, n);
    case DType::Q5_K: return dequant_k4<BlockQ5_K, values_q5_k>(wrow, out, n);
    case DType::Q6_K: return dequant_q6_k(wrow, out, n);
    default: fail("dequantize_row: dtype ", dtype_name(weight), " is not supported");
  }
}

}  // namespace zen::kernels::ref
