// The VNNI packed kernels (packed_vnni.inc) in their EVEX encoding on 256-bit registers:
// AVX512-VNNI with AVX512-VL and -BW (Ice Lake, Sapphire Rapids and later Xeons, AMD Zen 4).
// Chosen at run time (packed.cc). ZEN_PACKED_ZMM: the k-quant kernels also run two groups at
// once in 512-bit registers when a step has several tokens.
// GCC 12's 512-bit intrinsics start from _mm512_undefined registers that -Wmaybe-uninitialized
// reports once inlined (a false positive), so that one warning is off for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#define ZEN_PACKED_NAMESPACE avx512vnni
#define ZEN_PACKED_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define ZEN_PACKED_ZMM 1
#define ZEN_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#define ZEN_DPWSSD(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#include "kernels/cpu/packed_vnni.inc"
#endif  // ZEN_HAVE_X86_SIMD
