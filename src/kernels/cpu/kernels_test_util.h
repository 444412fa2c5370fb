// Helpers shared by the kernels/cpu tests: random weight rows in any block format with sane
// (finite, varied) scales, and a guard that runs code with the SIMD paths switched off.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/numeric.h"
#include "io/tensor.h"
#include "kernels/cpu/quant.h"

namespace zen::kernels::testing {

// Random f32 values of varied magnitude per 32-block, with an all-zero block when n >= 64.
inline std::vector<float> random_activations(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-4.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  float scale = 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) scale = std::exp(log_scale(rng));
    x[static_cast<size_t>(i)] = normal(rng) * scale;
  }
  if (n >= 64)
    for (int64_t i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = 0.0f;
  return x;
}

inline uint16_t random_f16(std::mt19937& rng, float lo_log, float hi_log, bool allow_negative = false) {
  std::uniform_real_distribution<float> u(lo_log, hi_log);
  float v = std::exp(u(rng));
  if (allow_negative && (rng() & 1u)) v = -v;
  return f32_to_f16(v);
}

inline void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// rows x k weights in `dtype`: random quant bits, random finite scales.
inline std::vector<uint8_t> random_weights(std::mt19937& rng, DType dtype, int64_t rows, int64_t k) {
  const size_t row_bytes = dtype_row_bytes(dtype, k);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(rows));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  if (dtype == DType::F32) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = 0; i < w.size() / 4; ++i) {
      const float v = normal(rng);
      std::memcpy(&w[4 * i], &v, 4);
    }
    return w;
  }
  if (dtype == DType::F16 || dtype == DType::BF16) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = 0; i < w.size() / 2; ++i)
      put_u16(&w[2 * i], dtype == DType::F16 ? f32_to_f16(normal(rng)) : f32_to_bf16(normal(rng)));
    return w;
  }
  const size_t bb = dtype_block_bytes(dtype);
  for (size_t off = 0; off < w.size(); off += bb) {
    uint8_t* b = &w[off];
    switch (dtype) {
      case DType::Q4_0:
      case DType::Q5_0:
      case DType::Q8_0: put_u16(b, random_f16(rng, -6, 0, true)); break;
      case DType::Q4_1:
      case DType::Q5_1:
        put_u16(b, random_f16(rng, -6, 0));
        put_u16(b + 2, random_f16(rng, -5, 1, true));
        break;
      case DType::Q4_K:
      case DType::Q5_K:
        put_u16(b, random_f16(rng, -8, -2));
        put_u16(b + 2, random_f16(rng, -9, -3));
        break;
      case DType::Q6_K: put_u16(b + 208, random_f16(rng, -10, -4, true)); break;
      default: break;
    }
  }
  return w;
}

// A random [n, k] weight matrix that owns its bytes, with a view over them. Not copyable:
// the view points into the vector.
struct RandomMatrix {
  std::vector<uint8_t> bytes;
  TensorView view;
  RandomMatrix(std::mt19937& rng, DType t, int64_t n, int64_t k) : bytes(random_weights(rng, t, n, k)) {
    view.name = "w";
    view.dtype = t;
    view.shape = {n, k};
    view.data = bytes.data();
    view.nbytes = bytes.size();
  }
  RandomMatrix(const RandomMatrix&) = delete;
  RandomMatrix& operator=(const RandomMatrix&) = delete;
};

// Weight dtypes with a dot product, and a K that suits each (multiple of its block).
inline std::vector<DType> all_weight_dtypes() {
  return {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
          DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
}

// Runs the enclosing scope with SIMD off; restores the previous setting.
class ScalarOnly {
 public:
  ScalarOnly() : was_(simd_enabled()) { set_simd_enabled(false); }
  ~ScalarOnly() { set_simd_enabled(was_); }
  ScalarOnly(const ScalarOnly&) = delete;
  ScalarOnly& operator=(const ScalarOnly&) = delete;

 private:
  bool was_;
};

// Activation row for `dtype`, quantized with the dispatched or the scalar quantizer.
inline std::vector<uint8_t> prepare_activation(DType dtype, const float* x, int64_t k) {
  std::vector<uint8_t> a(activation_row_bytes(dtype, k));
  quantize_activation(dtype, x, a.data(), k);
  return a;
}

}  // namespace zen::kernels::testing
