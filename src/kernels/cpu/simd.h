// Run-time SIMD selection for kernels/cpu. On x86-64 the fast paths are compiled for
// AVX2+FMA+F16C with per-function target attributes (ZEN_TARGET_AVX2), so the library runs on
// any x86-64 and picks them only when the CPU has them. On aarch64 the NEON paths (baseline
// ARMv8.0 Advanced SIMD) are always available; their dot-product-extension variants are
// chosen at run time (quant_neon.cc). Internal to kernels/cpu.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define ZEN_HAVE_X86_SIMD 1
#define ZEN_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define ZEN_HAVE_X86_SIMD 0
#define ZEN_TARGET_AVX2
#endif

#if defined(__aarch64__)
#define ZEN_HAVE_NEON 1
#else
#define ZEN_HAVE_NEON 0
#endif

#if ZEN_HAVE_X86_SIMD
#include <immintrin.h>
#endif

namespace zen::kernels {

#if ZEN_HAVE_X86_SIMD
// Horizontal sums shared by the AVX2 kernels.
ZEN_TARGET_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

ZEN_TARGET_AVX2 inline double hsum(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}
#endif

// True when the AVX2 paths should be used: CPU support and not disabled by
// set_simd_enabled(false). Cheap (one relaxed atomic load).
bool use_avx2();
// True when the AVX-512 paths (ops_avx512.cc) should be used: use_avx2() and a CPU with
// AVX-512 F and VL.
bool use_avx512();
// True when the NEON paths should be used: an aarch64 build and not disabled by
// set_simd_enabled(false).
bool use_neon();

}  // namespace zen::kernels
