// GGUF v2/v3 reader (llama.cpp's container): metadata key/values and tensor views into the
// memory-mapped file. Every offset and length is bounds-checked; a malformed file throws
// zen::Error naming the file and what is wrong, never crashes.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/mmap.h"
#include "io/tensor.h"

namespace zen {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

struct GgufValue {
  GgufType type = GgufType::U32;
  GgufType array_type = GgufType::U32;  // element type when type == ARRAY
  int64_t i = 0;       // integer and bool scalars
  double f = 0;        // float scalars
  std::string s;       // STRING
  std::vector<std::string> strings;  // ARRAY of STRING
  std::vector<double> numbers;       // ARRAY of numbers/bools (exact for |v| < 2^53)

  bool is_int() const;
  bool is_float() const;
  double as_number() const;  // any numeric scalar or bool; throws otherwise
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // throws zen::Error

  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  // Typed lookups; throw if present with the wrong type.
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;  // accepts ints too
  std::optional<bool> get_bool(const std::string& key) const;
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return file_.path(); }
  size_t file_size() const { return file_.size(); }
  const MappedFile& file() const { return file_; }
  uint64_t alignment() const { return alignment_; }     // general.alignment, default 32
  size_t data_offset() const { return data_offset_; }  // file offset of the data section

 private:
  MappedFile file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<TensorView> tensors_;
  uint64_t alignment_ = 32;
  size_t data_offset_ = 0;
};

}  // namespace zen
