// Helpers shared by the libFuzzer targets (one per parser of untrusted bytes).
//
// What counts as a finding: a crash, a sanitizer report, a hang (libFuzzer's -timeout), an
// allocation past -rss_limit_mb / -malloc_limit_mb, or any exception other than the project's
// expected ones (zen::Error, server::ApiError), which escapes LLVMFuzzerTestOneInput and aborts.
// With ZEN_FUZZ_STRICT_CHECKS=1 in the environment (tools/fuzz.sh's default) a failed
// internal invariant (ZEN_CHECK, a zen::Error saying "<file>:<line>: check failed") is a
// finding too: untrusted input should be refused by validation, not by an internal check.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "base/error.h"

#ifndef ZEN_FUZZ_SRC_DIR  // set by fuzz/CMakeLists.txt: the src/ folder, as __FILE__ spells it
#define ZEN_FUZZ_SRC_DIR ""
#endif

namespace zen::fuzz {

inline bool strict_checks() {
  static const bool strict = [] {
    const char* v = std::getenv("ZEN_FUZZ_STRICT_CHECKS");
    return v != nullptr && std::strcmp(v, "0") != 0 && *v != '\0';
  }();
  return strict;
}

// Whether a message is ZEN_CHECK's: "<ZEN_FUZZ_SRC_DIR><file>:<line>: check failed: ...".
// Compared by hand in an uninstrumented function: libFuzzer learns the operands of
// instrumented comparisons and of strstr/memcmp, and would write the pattern into inputs
// that messages quote (a GGUF key, a JSON literal), faking a finding.
__attribute__((no_sanitize("coverage"))) inline bool is_internal_check(const char* what) {
  const char* prefix = ZEN_FUZZ_SRC_DIR;
  for (; *prefix != '\0'; ++prefix, ++what)
    if (*what != *prefix) return false;
  while (*what != '\0' && *what != ':') ++what;  // the file name
  if (*what++ != ':') return false;
  if (*what < '0' || *what > '9') return false;
  while (*what >= '0' && *what <= '9') ++what;  // the line
  for (const char* rest = ": check failed: "; *rest != '\0'; ++rest, ++what)
    if (*what != *rest) return false;
  return true;
}

// Call from every catch of an expected error (zen::Error, server::ApiError): the outcome
// for malformed input. ZEN_FUZZ_VERBOSE=1 prints each message (to check what seeds reach).
inline void expected_error(const std::exception& e) {
  static const bool verbose = std::getenv("ZEN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "expected error: %s\n", e.what());
  if (strict_checks() && is_internal_check(e.what())) {
    std::fprintf(stderr, "internal check failed on fuzz input: %s\n", e.what());
    std::abort();
  }
}

// A per-process scratch folder ($TMPDIR or /tmp, then zen-fuzz-<pid>), created on first use
// and removed at a normal exit. Loaders that only take a path read the input from files written here, reused by
// every call (no in-memory constructor exists for them).
inline const std::string& scratch_dir() {
  struct Scratch {
    std::string dir;
    Scratch() {
      const char* tmp = std::getenv("TMPDIR");
      dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/zen-fuzz-" +
            std::to_string(static_cast<long>(::getpid()));
      std::filesystem::create_directories(dir);
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Scratch scratch;
  return scratch.dir;
}

// Writes bytes to scratch_dir()/name (sub-folders created) and returns the full path.
inline std::string write_scratch(const std::string& name, const void* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();  // the harness, not the input, is broken
  }
  return path;
}

inline std::string write_scratch(const std::string& name, std::string_view text) {
  return write_scratch(name, text.data(), text.size());
}

// The input split at its first NUL byte: (before, after); after is empty without a NUL.
inline std::pair<std::string_view, std::string_view> split_at_nul(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  if (nul == std::string_view::npos) return {all, {}};
  return {all.substr(0, nul), all.substr(nul + 1)};
}

// Reads every byte of [p, p + n) so ASan checks the whole range; the result is only there to
// keep the reads from being optimised away.
inline uint32_t touch(const void* p, size_t n) {
  const auto* b = static_cast<const volatile uint8_t*>(p);
  uint32_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += b[i];
  return sum;
}

// Reads the first and last byte of [p, p + n) (tensor data can be large).
inline uint32_t touch_ends(const void* p, size_t n) {
  if (n == 0) return 0;
  const auto* b = static_cast<const volatile uint8_t*>(p);
  return static_cast<uint32_t>(b[0]) + b[n - 1];
}

}  // namespace zen::fuzz
