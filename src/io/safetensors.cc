// Safetensors reader. Layout: u64 LE header length N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [d0, d1], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data buffer; offsets are relative to its start (byte 8 + N).
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"

namespace zen {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;  // as the reference library

bool dtype_from_safetensors(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kTable[] = {
      {"F32", DType::F32},         {"F16", DType::F16},         {"BF16", DType::BF16},
      {"F64", DType::F64},         {"I8", DType::I8},           {"I16", DType::I16},
      {"I32", DType::I32},         {"I64", DType::I64},         {"U8", DType::U8},
      {"BOOL", DType::BOOL},       {"F8_E4M3", DType::F8_E4M3}, {"F8_E5M2", DType::F8_E5M2},
  };
  for (const auto& [name, dtype] : kTable) {
    if (s == name) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

// A non-negative JSON integer as uint64; false for floats, negatives, non-numbers.
bool json_to_u64(const nlohmann::json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

struct Entry {
  TensorView view;
  uint64_t begin = 0;
  uint64_t end = 0;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j,
                  uint64_t data_size) {
  Entry e;
  e.view.name = name;
  if (!j.is_object()) fail(path, ": tensor '", name, "' header entry is not an object");
  const auto dtype_it = j.find("dtype");
  const auto shape_it = j.find("shape");
  const auto offsets_it = j.find("data_offsets");
  if (dtype_it == j.end() || !dtype_it->is_string())
    fail(path, ": tensor '", name, "' has no string 'dtype'");
  if (shape_it == j.end() || !shape_it->is_array())
    fail(path, ": tensor '", name, "' has no array 'shape'");
  if (offsets_it == j.end() || !offsets_it->is_array() || offsets_it->size() != 2)
    fail(path, ": tensor '", name, "' has no 'data_offsets' pair");

  const std::string& dtype = dtype_it->get_ref<const std::string&>();
  if (!dtype_from_safetensors(dtype, &e.view.dtype))
    fail(path, ": tensor '", name, "' has unsupported dtype '", dtype, "'");

  uint64_t numel = 1;
  for (const auto& d : *shape_it) {
    uint64_t dim = 0;
    if (!json_to_u64(d, &dim) || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path, ": tensor '", name, "' has an invalid shape entry ", d.dump());
    if (__builtin_mul_overflow(numel, dim, &numel))
      fail(path, ": tensor '", name, "' is too large (element count overflows)");
    e.view.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t nbytes = 0;
  if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, dtype_block_bytes(e.view.dtype), &nbytes))
    fail(path, ": tensor '", name, "' is too large (byte size overflows)");

  if (!json_to_u64((*offsets_it)[0], &e.begin) || !json_to_u64((*offsets_it)[1], &e.end))
    fail(path, ": tensor '", name, "' has invalid data_offsets (need two non-negative integers)");
  if (e.begin > e.end || e.end > data_size)
    fail(path, ": tensor '", name, "' data_offsets [", e.begin, ", ", e.end,
         "] lie outside the data buffer of ", data_size, " bytes (file truncated?)");
  if (e.end - e.begin != nbytes)
    fail(path, ": tensor '", name, "' data_offsets span ", e.end - e.begin, " bytes but ", dtype,
         " x ", e.view.shape_str(), " needs ", nbytes);
  e.view.nbytes = static_cast<size_t>(nbytes);
  return e;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const uint64_t size = file_.size();
  if (size < 8) fail(path, ": not a safetensors file (", size, " bytes, shorter than the header length)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_.data(), 8);  // little-endian host (checked in gguf.cc)
  if (header_len > kMaxHeaderBytes)
    fail(path, ": safetensors header length ", header_len, " exceeds the 100 MB limit");
  if (header_len > size - 8)
    fail(path, ": safetensors header length ", header_len, " exceeds the file size ", size);
  const char* header = reinterpret_cast<const char*>(file_.data() + 8);
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;

  // The DOM silently keeps one of two equal keys; catch duplicates at the top level here.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header, header + header_len, on_event);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": safetensors header is not valid JSON: ", e.what());
  }
  if (!duplicate.empty()) fail(path, ": duplicate tensor name '", duplicate, "' in safetensors header");
  if (!root.is_object()) fail(path, ": safetensors header is not a JSON object");

  std::vector<Entry> entries;
  entries.reserve(root.size());
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(path, ": safetensors __metadata__ is not an object");
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) fail(path, ": safetensors __metadata__ value for '", key, "' is not a string");
        metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, value, data_size));
  }

  // File order; then no two non-empty tensors may share bytes.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin == e.end) continue;
    if (prev != nullptr && prev->end > e.begin)
      fail(path, ": tensors '", prev->view.name, "' and '", e.view.name, "' overlap in the data buffer");
    prev = &e;
  }

  tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    e.view.data = file_.data() + data_start + e.begin;
    tensors_.push_back(std::move(e.view));
  }
}

}  // namespace zen
