// GGUF v2/v3 reader (llama.cpp's container): metadata key/values and tensor views into the
// memory-mapped file. Every offset and length is bounds-checked; a malformed file throws
// zen::Error naming the file and what is wrong, never crashes.
#pragma once
#include <cstdint>
#include <map>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mmap.h"
#include "io/tensor.h"

namespace zen {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

// An ARRAY of STRING, read in place from the mapping (a 151k-token vocabulary copied into
// std::strings cost ~10 MB of heap for as long as the file stayed open). Each element is a
// u64 length + bytes, validated when the file was opened; iteration walks them in order.
class GgufStringArray {
 public:
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = const std::string_view*;
    using reference = std::string_view;
    const_iterator() = default;
    explicit const_iterator(const uint8_t* p) : p_(p) {}
    std::string_view operator*() const {
      uint64_t len;
      std::memcpy(&len, p_, sizeof(len));
      return {reinterpret_cast<const char*>(p_ + sizeof(len)), static_cast<size_t>(len)};
    }
    const_iterator& operator++() {
      p_ += sizeof(uint64_t) + (**this).size();
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++*this;
      return old;
    }
    bool operator==(const const_iterator& o) const { return p_ == o.p_; }

   private:
    const uint8_t* p_ = nullptr;
  };
  using iterator = const_iterator;
  using value_type = std::string_view;

  GgufStringArray() = default;
  // [begin, end): count elements, the last one at `last` (unused when count == 0).
  GgufStringArray(const uint8_t* begin, const uint8_t* end, const uint8_t* last, size_t count)
      : begin_(begin), end_(end), last_(last), count_(count) {}
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  const_iterator begin() const { return const_iterator(begin_); }
  const_iterator end() const { return const_iterator(end_); }
  std::string_view back() const { return *const_iterator(last_); }
  // Bytes of all the strings together (without their length prefixes).
  size_t text_bytes() const { return static_cast<size_t>(end_ - begin_) - count_ * sizeof(uint64_t); }
  bool operator==(const std::vector<std::string>& other) const;

 private:
  const uint8_t* begin_ = nullptr;
  const uint8_t* end_ = nullptr;
  const uint8_t* last_ = nullptr;
  size_t count_ = 0;
};

// An ARRAY of numbers or bools, read in place from the mapping; element i as a double
// (exact for |v| < 2^53).
class GgufNumberArray {
 public:
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = double;
    using difference_type = std::ptrdiff_t;
    using pointer = const double*;
    using reference = double;
    const_iterator() = default;
    const_iterator(const GgufNumberArray* a, size_t i) : a_(a), i_(i) {}
    double operator*() const { return (*a_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++i_;
      return old;
    }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }

   private:
    const GgufNumberArray* a_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = const_iterator;
  using value_type = double;

  GgufNumberArray() = default;
  GgufNumberArray(const uint8_t* data, GgufType type, size_t count) : data_(data), type_(type), count_(count) {}
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  double operator[](size_t i) const;  // i < size()
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, count_}; }
  bool operator==(const std::vector<double>& other) const;

 private:
  const uint8_t* data_ = nullptr;
  GgufType type_ = GgufType::U32;
  size_t count_ = 0;
};

struct GgufValue {
  GgufType type = GgufType::U32;
  GgufType array_type = GgufType::U32;  // element type when type == ARRAY
  int64_t i = 0;       // integer and bool scalars
  double f = 0;        // float scalars
  std::string s;       // STRING
  GgufStringArray strings;  // ARRAY of STRING (views into the file: valid while it is open)
  GgufNumberArray numbers;  // ARRAY of numbers/bools (likewise)

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
