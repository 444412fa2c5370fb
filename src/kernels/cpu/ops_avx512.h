// AVX-512 versions of ops.h's attention block ops (ops_avx512.cc). Call only when
// use_avx512(). Internal.
#pragma once
#include <cstdint>

namespace zen::kernels::avx512 {

void dot_tile_f32(const float* const* q, int64_t n_q, const float* k, int64_t k_stride, int64_t count, int64_t n, float scale,
                  float* out, int64_t out_stride);
void axpy_rows_f32(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t count, int64_t n, float* acc,
                   int64_t acc_stride, int64_t n_acc);

}  // namespace zen::kernels::avx512
