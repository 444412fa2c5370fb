// Cache-line (64-byte) aligned f32 storage. The AVX2 kernels load and store 32-byte vectors;
// on a buffer from plain new/malloc (16-byte aligned: large blocks sit 16 bytes into a page)
// every other such access straddles two lines and costs two. Buffers the kernels stream over
// (recurrent states, the chunked delta rule's scratch) come from here.
#pragma once
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace zen {

inline constexpr size_t kCacheLine = 64;

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kCacheLine})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{kCacheLine}); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

// An uninitialised aligned array (untouched pages are not committed).
struct AlignedDelete {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t{kCacheLine}); }
};
using AlignedFloats = std::unique_ptr<float[], AlignedDelete>;
inline AlignedFloats make_aligned_floats(size_t n) {
  return AlignedFloats(static_cast<float*>(::operator new[](n * sizeof(float), std::align_val_t{kCacheLine})));
}

}  // namespace zen
