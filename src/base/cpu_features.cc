#include "base/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdint>

namespace zen {
namespace {

#if defined(__x86_64__) || defined(__i386__)
bool bit(uint32_t reg, int n) { return (reg >> n) & 1; }

X86Features detect() {
  X86Features f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = bit(c, 27), avx = bit(c, 28);
  if (!osxsave || !avx) return f;
  uint32_t xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_saved = (xcr0_lo & 0x6) == 0x6;      // SSE and AVX state
  const bool zmm_saved = (xcr0_lo & 0xE6) == 0xE6;    // plus opmask and both ZMM halves
  if (!ymm_saved) return f;
  f.fma = bit(c, 12);
  f.f16c = bit(c, 29);
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned leaf7_subleaves = a;
  f.avx2 = bit(b, 5);
  f.avx512f = zmm_saved && bit(b, 16);
  f.avx512vl = f.avx512f && bit(b, 31);
  f.avx512bw = f.avx512f && bit(b, 30);
  f.avx512vnni = f.avx512f && bit(c, 11);
  if (leaf7_subleaves >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avxvnni = bit(a, 4);
  }
  return f;
}
#else
X86Features detect() { return {}; }
#endif

}  // namespace

const X86Features& x86_features() {
  static const X86Features features = detect();
  return features;
}

}  // namespace zen
