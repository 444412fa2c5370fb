// Test-only helpers: write tiny GGUF and safetensors files byte by byte so tests can build
// valid inputs and then break them in exactly one place. Included by src/io/*_test.cc only.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zen::testing_io {

inline void put_u8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
template <typename T>
void put_le(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
inline void put_u32(std::string& out, uint32_t v) { put_le(out, v); }
inline void put_u64(std::string& out, uint64_t v) { put_le(out, v); }
inline void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

// A fresh path under the gtest temp dir; unique per call within the process. Whatever an
// earlier process of the same pid left there is removed: test.sh runs the suite twice (plain,
// then ASan), a test per process, and a reused pid once found another test's
// hf_quant_config.json in "its" folder.
inline std::string temp_path(const std::string& stem) {
  static int counter = 0;
  const std::string path = ::testing::TempDir() + "zen_io_" + std::to_string(::getpid()) + "_" +
                           std::to_string(counter++) + "_" + stem;
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
  return path;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  // Unlink first: truncating a just-written file makes ext4 flush it (auto_da_alloc), which
  // turned the every-prefix loops into seconds of I/O wait.
  std::remove(path.c_str());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

// GGUF value type ids (gguf.h's GgufType) for serialized metadata.
enum : uint32_t { kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64 };
// ggml type ids.
enum : uint32_t { kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ8_0 = 8, kGgmlQ4_K = 12, kGgmlBF16 = 30 };

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> ne;  // innermost first, as stored
  uint32_t type = kGgmlF32;
  uint64_t nbytes = 0;
  uint64_t offset = 0;  // relative to the data section
};

// Builds a GGUF file: metadata entries are serialized as added; tensors get aligned offsets
// and data bytes filled with (tensor index + 1). Counts and offsets can be overridden to lie.
struct GgufBuilder {
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::string kv;  // serialized entries
  uint64_t kv_count = 0;
  std::vector<GgufTensorSpec> tensors;

  void key(const std::string& k, uint32_t type) {
    put_str(kv, k);
    put_u32(kv, type);
    ++kv_count;
  }
  void add_u32(const std::string& k, uint32_t v) { key(k, kU32); put_u32(kv, v); }
  void add_string(const std::string& k, const std::string& v) { key(k, kString); put_str(kv, v); }
  void add_f32(const std::string& k, float v) { key(k, kF32); put_le(kv, v); }
  void add_strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, kArray);
    put_u32(kv, kString);
    put_u64(kv, v.size());
    for (const auto& s : v) put_str(kv, s);
  }
  void add_i32s(const std::string& k, const std::vector<int32_t>& v) {
    key(k, kArray);
    put_u32(kv, kI32);
    put_u64(kv, v.size());
    for (int32_t x : v) put_le(kv, x);
  }

  // Bytes per tensor for the few types the tests use.
  static uint64_t bytes_for(uint32_t type, const std::vector<uint64_t>& ne) {
    uint64_t numel = 1;
    for (uint64_t d : ne) numel *= d;
    switch (type) {
      case kGgmlF32: return numel * 4;
      case kGgmlF16:
      case kGgmlBF16: return numel * 2;
      case kGgmlQ4_0: return numel / 32 * 18;
      case kGgmlQ8_0: return numel / 32 * 34;
      case kGgmlQ4_K: return numel / 256 * 144;
      default: return numel;
    }
  }
  GgufTensorSpec& add_tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type = kGgmlF32) {
    uint64_t next = 0;
    for (const auto& t : tensors) next = std::max(next, t.offset + t.nbytes);
    next = (next + alignment - 1) / alignment * alignment;
    GgufTensorSpec t{name, ne, type, bytes_for(type, ne), next};
    tensors.push_back(t);
    return tensors.back();
  }

  // Header + metadata + tensor infos, before alignment padding.
  std::string header(uint64_t tensor_count_override = UINT64_MAX) const {
    std::string out = "GGUF";
    put_u32(out, version);
    put_u64(out, tensor_count_override != UINT64_MAX ? tensor_count_override : tensors.size());
    put_u64(out, kv_count);
    out += kv;
    for (const auto& t : tensors) {
      put_str(out, t.name);
      put_u32(out, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) put_u64(out, d);
      put_u32(out, t.type);
      put_u64(out, t.offset);
    }
    return out;
  }

  std::string build() const {
    std::string out = header();
    while (out.size() % alignment != 0) out.push_back('\0');
    uint64_t end = 0;
    for (const auto& t : tensors) end = std::max(end, t.offset + t.nbytes);
    std::string data(end, '\0');
    for (size_t i = 0; i < tensors.size(); ++i)
      for (uint64_t b = 0; b < tensors[i].nbytes && tensors[i].offset + b < end; ++b)
        data[tensors[i].offset + b] = static_cast<char>(i + 1);
    return out + data;
  }
};

// A safetensors file from a JSON header and a data buffer (header length prefixed).
inline std::string safetensors_bytes(const std::string& header_json, const std::string& data) {
  std::string out;
  put_u64(out, header_json.size());
  return out + header_json + data;
}

// Builds a consistent safetensors header for F32/BF16/... tensors laid out back to back;
// data bytes of tensor i are filled with (i + 1).
struct SafetensorsBuilder {
  struct Spec {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    size_t elem_bytes;
  };
  std::vector<Spec> specs;
  nlohmann::json metadata;

  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, size_t elem_bytes = 4) {
    specs.push_back({name, dtype, std::move(shape), elem_bytes});
  }
  std::string header_json() const {
    nlohmann::json h = nlohmann::json::object();
    size_t offset = 0;
    for (const auto& s : specs) {
      size_t n = s.elem_bytes;
      for (int64_t d : s.shape) n *= static_cast<size_t>(d);
      h[s.name] = {{"dtype", s.dtype}, {"shape", s.shape}, {"data_offsets", {offset, offset + n}}};
      offset += n;
    }
    if (!metadata.is_null()) h["__metadata__"] = metadata;
    return h.dump();
  }
  std::string data() const {
    std::string d;
    for (size_t i = 0; i < specs.size(); ++i) {
      size_t n = specs[i].elem_bytes;
      for (int64_t x : specs[i].shape) n *= static_cast<size_t>(x);
      d.append(n, static_cast<char>(i + 1));
    }
    return d;
  }
  std::string build() const { return safetensors_bytes(header_json(), data()); }
};

}  // namespace zen::testing_io
