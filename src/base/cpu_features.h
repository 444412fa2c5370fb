// x86 SIMD features, read with CPUID and XGETBV once: an extension counts only when the CPU has
// it and the OS saves its registers (XCR0). Written out instead of __builtin_cpu_supports,
// whose feature names depend on the compiler's age (clang 14 knows no "avxvnni").
#pragma once

namespace zen {

struct X86Features {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512vl = false, avx512bw = false, avx512vnni = false;
  bool avxvnni = false;
};

// All false off x86.
const X86Features& x86_features();

}  // namespace zen
