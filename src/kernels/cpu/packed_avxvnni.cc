// The VNNI packed kernels (packed_vnni.inc) in their VEX encoding: AVX-VNNI (Alder Lake and
// later Intel cores, AMD Zen 5). Chosen at run time (packed.cc).
#include "kernels/cpu/simd.h"

#if ZEN_HAVE_X86_SIMD
#define ZEN_PACKED_NAMESPACE avxvnni
#define ZEN_PACKED_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define ZEN_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define ZEN_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#include "kernels/cpu/packed_vnni.inc"
#endif  // ZEN_HAVE_X86_SIMD
