// memcpy, memmove and memset for everything linked into libzen_isa_probe.so, so the code run
// inside the emulator never calls into the host's glibc. glibc picks its string functions by
// ifunc for the host CPU: on an AVX-512 host memset is an EVEX build, which an emulated core
// without AVX-512 rightly refuses (#UD), so the result would depend on the host. These use
// only baseline x86-64 (rep movsb / rep stosb). Hidden: calls inside the module bind here
// directly, without the PLT, and nothing outside the module sees them. run.py maps no other
// module's code into the guest, so any call that still leaves the module faults by name.
#include <cstddef>

// Declared under their own names with the libc symbol as asm label: GCC's built-in
// declarations of memcpy & co. would not take the visibility attribute.
#define GUEST_LIBC(symbol) extern "C" __attribute__((visibility("hidden"), used)) void* symbol

GUEST_LIBC(guest_memcpy)(void* dst, const void* src, std::size_t n) asm("memcpy");
GUEST_LIBC(guest_memmove)(void* dst, const void* src, std::size_t n) asm("memmove");
GUEST_LIBC(guest_memset)(void* dst, int value, std::size_t n) asm("memset");

void* guest_memcpy(void* dst, const void* src, std::size_t n) {
  void* d = dst;
  asm volatile("rep movsb" : "+D"(d), "+S"(src), "+c"(n) : : "memory");
  return dst;
}

void* guest_memmove(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (d <= s || d >= s + n) return guest_memcpy(dst, src, n);
  // Overlapping with dst above src: copy backwards, last byte first.
  d += n - 1;
  s += n - 1;
  asm volatile("std\n\trep movsb\n\tcld" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
  return dst;
}

void* guest_memset(void* dst, int value, std::size_t n) {
  void* d = dst;
  asm volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(value) : "memory");
  return dst;
}
