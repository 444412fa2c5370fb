// Run-time SIMD selection for kernels/cpu. Fast paths are compiled for AVX2+FMA+F16C with
// per-function target attributes (ZEN_TARGET_AVX2), so the library runs on any x86-64 and
// picks them only when the CPU has them. Internal to kernels/cpu.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define ZEN_HAVE_X86_SIMD 1
#define ZEN_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define ZEN_HAVE_X86_SIMD 0
#define ZEN_TARGET_AVX2
#endif

namespace zen::kernels {

// True when the AVX2 paths should be used: CPU support and not disabled by
// set_simd_enabled(false). Cheap (one relaxed atomic load).
bool use_avx2();

}  // namespace zen::kernels
