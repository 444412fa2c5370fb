// Thread-local scratch vectors keep their capacity from call to call (no allocation in steady
// state), but not without bound: a call that grew one past kScratchKeepBytes frees it when it
// ends. Long-lived threads (the HTTP workers) otherwise each kept the peak of the largest
// input they ever saw: a 4 MiB prompt left about 70 MB in every worker that tokenized one.
#pragma once
#include <cstddef>
#include <vector>

namespace zen {

inline constexpr size_t kScratchKeepBytes = size_t{1} << 20;

template <typename T>
class ScratchGuard {
 public:
  explicit ScratchGuard(std::vector<T>& v) : v_(v) {}
  ~ScratchGuard() {
    if (v_.capacity() * sizeof(T) > kScratchKeepBytes) std::vector<T>().swap(v_);
  }
  ScratchGuard(const ScratchGuard&) = delete;
  ScratchGuard& operator=(const ScratchGuard&) = delete;

 private:
  std::vector<T>& v_;
};

}  // namespace zen
