// The DFlash tests' reference files (tools/make_dflash*_fixtures.py): where they live, and a
// tensor read out of one by name.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/safetensors.h"

namespace zen::spec::dflash::test_reference {

inline const std::filesystem::path kDir = std::filesystem::path(ZEN_SOURCE_DIR) / "tests/fixtures/dflash";

// The tensor's elements as T (its byte size must fit), and optionally its shape.
template <typename T>
std::vector<T> tensor(const SafetensorsFile& f, const std::string& name, std::vector<int64_t>* shape = nullptr) {
  for (const TensorView& t : f.tensors())
    if (t.name == name) {
      ZEN_CHECK(t.nbytes == static_cast<size_t>(t.numel()) * sizeof(T), name);
      std::vector<T> out(static_cast<size_t>(t.numel()));
      std::memcpy(out.data(), t.data, t.nbytes);
      if (shape != nullptr) *shape = t.shape;
      return out;
    }
  ADD_FAILURE() << "reference lacks " << name;
  return {};
}

}  // namespace zen::spec::dflash::test_reference
