// AVX2+FMA versions of ops.h (ops_avx2.cc). Call only when use_avx2(). Internal.
#pragma once
#include <cstdint>

namespace zen::kernels::avx2 {

void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* out);
void add_inplace(float* y, const float* x, int64_t n);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
void softmax_inplace(float* x, int64_t n);
void exp_f32(const float* x, int64_t n, float* out);
void bf16_to_f32_row(const uint16_t* src, float* out, int64_t n);
void dot_tile_f32(const float* const* q, int64_t n_q, const float* k, int64_t k_stride, int64_t count, int64_t n, float scale,
                  float* out, int64_t out_stride);
void axpy_rows_f32(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t count, int64_t n, float* acc,
                   int64_t acc_stride, int64_t n_acc);
int64_t argmax_f32(const float* x, int64_t n);

}  // namespace zen::kernels::avx2
