// Largest magnitudes and differences of float vectors, for tests that compare against a
// reference (golden logits, another backend, another layout).
#pragma once
#include <algorithm>
#include <cmath>
#include <span>

namespace zen {

// max |v[i]|; 0 for an empty span.
inline float max_abs(std::span<const float> v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max |a[i] - b[i]| over the shorter of the two (the tests check the sizes themselves).
inline float max_diff(std::span<const float> a, std::span<const float> b) {
  float m = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace zen
