// GGUF v2/v3 reader. Layout (all little-endian):
//   magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 type, value },
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
//   padding to `general.alignment` (default 32), then the data section; offsets are relative
//   to its start. A string is u64 length + bytes (no terminator); an array is u32 element
//   type + u64 count + elements.
// Every count and length is checked against the bytes that remain before anything is
// allocated, so a lying header cannot make us allocate gigabytes or read past the mapping.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_set>

#include "base/error.h"

namespace zen {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

// Bytes of one scalar of a fixed-size type; 0 for STRING and ARRAY.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL: return 1;
    case GgufType::U16:
    case GgufType::I16: return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32: return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64: return 8;
    case GgufType::STRING:
    case GgufType::ARRAY: return 0;
  }
  return 0;
}

bool is_int_type(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::U16:
    case GgufType::I16:
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::U64:
    case GgufType::I64: return true;
    default: return false;
  }
}

bool is_float_type(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

// ggml_type id -> DType; false for types we do not support.
bool dtype_from_ggml(uint32_t id, DType* out) {
  switch (id) {
    case 0: *out = DType::F32; return true;
    case 1: *out = DType::F16; return true;
    case 2: *out = DType::Q4_0; return true;
    case 3: *out = DType::Q4_1; return true;
    case 6: *out = DType::Q5_0; return true;
    case 7: *out = DType::Q5_1; return true;
    case 8: *out = DType::Q8_0; return true;
    case 12: *out = DType::Q4_K; return true;
    case 13: *out = DType::Q5_K; return true;
    case 14: *out = DType::Q6_K; return true;
    case 24: *out = DType::I8; return true;
    case 25: *out = DType::I16; return true;
    case 26: *out = DType::I32; return true;
    case 27: *out = DType::I64; return true;
    case 28: *out = DType::F64; return true;
    case 30: *out = DType::BF16; return true;
    default: return false;
  }
}

// Bounds-checked little-endian cursor over the mapped bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail(path_, ": truncated GGUF: ", what, " needs ", n, " bytes at offset ", pos_, ", only ",
           remaining(), " remain");
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    need(len, what);  // a lying length fails here, before any allocation
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  const uint8_t* here() const { return data_ + pos_; }
  void skip(size_t n) { pos_ += n; }  // caller has called need(n)

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

GgufType read_value_type(Cursor& in, const std::string& path, std::string_view key,
                         std::string_view what) {
  const uint32_t raw = in.read<uint32_t>(what);
  if (raw > static_cast<uint32_t>(GgufType::F64))
    fail(path, ": metadata key '", key, "' has unknown ", what, " ", raw);
  return static_cast<GgufType>(raw);
}

// Reads one fixed-size scalar at `p` as int64 (integers, bool) or double (floats).
struct Scalar {
  int64_t i = 0;
  double f = 0;
  bool u64_overflow = false;
};

Scalar decode_scalar(GgufType t, const uint8_t* p) {
  Scalar s;
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t) {
    case GgufType::U8: s.i = load(uint8_t{}); break;
    case GgufType::I8: s.i = load(int8_t{}); break;
    case GgufType::U16: s.i = load(uint16_t{}); break;
    case GgufType::I16: s.i = load(int16_t{}); break;
    case GgufType::U32: s.i = load(uint32_t{}); break;
    case GgufType::I32: s.i = load(int32_t{}); break;
    case GgufType::I64: s.i = load(int64_t{}); break;
    case GgufType::U64: {
      const uint64_t v = load(uint64_t{});
      s.u64_overflow = v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      s.i = s.u64_overflow ? 0 : static_cast<int64_t>(v);
      break;
    }
    case GgufType::BOOL: s.i = load(uint8_t{}) != 0 ? 1 : 0; break;
    case GgufType::F32: s.f = load(float{}); break;
    case GgufType::F64: s.f = load(double{}); break;
    case GgufType::STRING:
    case GgufType::ARRAY: break;
  }
  return s;
}

void read_array(Cursor& in, const std::string& path, std::string_view key, GgufValue& v) {
  v.array_type = read_value_type(in, path, key, "array element type");
  const uint64_t count = in.read<uint64_t>("array length");
  if (v.array_type == GgufType::ARRAY)
    fail(path, ": metadata key '", key, "' is an array of arrays, which is not supported");
  if (v.array_type == GgufType::STRING) {
    // Each string needs at least its 8-byte length: bounds the count before walking.
    if (count > in.remaining() / 8)
      fail(path, ": metadata key '", key, "' claims ", count, " strings but only ",
           in.remaining(), " bytes remain");
    // Validated here, read in place later (GgufStringArray): nothing is copied.
    const uint8_t* begin = in.here();
    const uint8_t* last = begin;
    for (uint64_t j = 0; j < count; ++j) {
      last = in.here();
      in.read_string("array string");
    }
    v.strings = GgufStringArray(begin, in.here(), last, static_cast<size_t>(count));
    return;
  }
  const size_t elem = scalar_size(v.array_type);
  if (count > in.remaining() / elem)
    fail(path, ": metadata key '", key, "' claims ", count, " ", gguf_type_name(v.array_type),
         " elements but only ", in.remaining(), " bytes remain");
  v.numbers = GgufNumberArray(in.here(), v.array_type, static_cast<size_t>(count));
  in.skip(static_cast<size_t>(count) * elem);
}

GgufValue read_value(Cursor& in, const std::string& path, std::string_view key) {
  GgufValue v;
  v.type = read_value_type(in, path, key, "value type");
  switch (v.type) {
    case GgufType::STRING: v.s = std::string(in.read_string("string value")); break;
    case GgufType::ARRAY: read_array(in, path, key, v); break;
    default: {
      const size_t n = scalar_size(v.type);
      in.need(n, "scalar value");
      const Scalar s = decode_scalar(v.type, in.here());
      if (s.u64_overflow)
        fail(path, ": metadata key '", key, "' holds a u64 value above the int64 range");
      v.i = s.i;
      v.f = s.f;
      in.skip(n);
    }
  }
  return v;
}

uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& path, std::string_view name) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail(path, ": tensor '", name, "' is too large (size overflows)");
  return r;
}

struct RawTensor {
  TensorView view;
  uint64_t offset = 0;  // relative to the data section
};

RawTensor read_tensor_info(Cursor& in, const std::string& path, uint64_t index) {
  RawTensor t;
  t.view.name = std::string(in.read_string("tensor name"));
  const std::string& name = t.view.name;
  if (name.empty()) fail(path, ": tensor #", index, " has an empty name");
  const uint32_t n_dims = in.read<uint32_t>("tensor dimension count");
  if (n_dims == 0 || n_dims > kMaxDims)
    fail(path, ": tensor '", name, "' has ", n_dims, " dimensions (expected 1 to ", kMaxDims, ")");
  uint64_t ne[kMaxDims] = {};
  uint64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    ne[d] = in.read<uint64_t>("tensor dimension");
    if (ne[d] == 0 || ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path, ": tensor '", name, "' has invalid dimension ", d, " = ", ne[d]);
    numel = checked_mul(numel, ne[d], path, name);
  }
  if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path, ": tensor '", name, "' has too many elements");
  const uint32_t type_id = in.read<uint32_t>("tensor type");
  if (!dtype_from_ggml(type_id, &t.view.dtype))
    fail(path, ": tensor '", name, "' has unsupported ggml type id ", type_id);
  t.offset = in.read<uint64_t>("tensor offset");

  const uint64_t block = static_cast<uint64_t>(dtype_block_elems(t.view.dtype));
  if (ne[0] % block != 0)
    fail(path, ": tensor '", name, "' of type ", dtype_name(t.view.dtype), " has innermost dimension ",
         ne[0], ", not a multiple of the block size ", block);
  t.view.nbytes = checked_mul(numel / block, dtype_block_bytes(t.view.dtype), path, name);
  // ne[0] is the contiguous dimension; our shapes are outermost first.
  t.view.shape.assign(n_dims, 0);
  for (uint32_t d = 0; d < n_dims; ++d) t.view.shape[n_dims - 1 - d] = static_cast<int64_t>(ne[d]);
  return t;
}

// Minimum bytes of a serialized kv pair (empty key, 1-byte value) and of a tensor info.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

}  // namespace

double GgufNumberArray::operator[](size_t i) const {
  const uint8_t* p = data_ + i * scalar_size(type_);
  if (is_float_type(type_)) return decode_scalar(type_, p).f;
  if (type_ == GgufType::U64) {  // above the int64 range too (decode_scalar zeroes those)
    uint64_t raw;
    std::memcpy(&raw, p, sizeof(raw));
    return static_cast<double>(raw);
  }
  return static_cast<double>(decode_scalar(type_, p).i);
}

bool GgufNumberArray::operator==(const std::vector<double>& other) const {
  return other.size() == size() && std::equal(begin(), end(), other.begin());
}

bool GgufStringArray::operator==(const std::vector<std::string>& other) const {
  return other.size() == size() && std::equal(begin(), end(), other.begin());
}

bool GgufValue::is_int() const { return is_int_type(type); }
bool GgufValue::is_float() const { return is_float_type(type); }

double GgufValue::as_number() const {
  if (is_int() || type == GgufType::BOOL) return static_cast<double>(i);
  if (is_float()) return f;
  fail("GGUF value of type ", gguf_type_name(type), " is not a number");
}

GgufFile::GgufFile(const std::string& path) : file_(path) {
  Cursor in(file_.data(), file_.size(), path);
  const uint32_t magic = in.read<uint32_t>("magic");
  if (std::memcmp(&magic, "GGUF", 4) != 0) fail(path, ": not a GGUF file (bad magic)");
  version_ = in.read<uint32_t>("version");
  if (version_ == 1) fail(path, ": GGUF version 1 is not supported (only 2 and 3)");
  if (version_ != 2 && version_ != 3) {
    if (version_ != 0 && (version_ & 0xFFFFu) == 0)
      fail(path, ": GGUF file appears to be big-endian (version word ", version_, "), not supported");
    fail(path, ": unsupported GGUF version ", version_, " (only 2 and 3)");
  }
  const uint64_t n_tensors = in.read<uint64_t>("tensor count");
  const uint64_t n_kv = in.read<uint64_t>("metadata count");
  if (n_kv > in.remaining() / kMinKvBytes)
    fail(path, ": GGUF header claims ", n_kv, " metadata entries, more than the file can hold");
  if (n_tensors > in.remaining() / kMinTensorInfoBytes)
    fail(path, ": GGUF header claims ", n_tensors, " tensors, more than the file can hold");

  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string_view key = in.read_string("metadata key");
    if (key.empty()) fail(path, ": metadata entry #", k, " has an empty key");
    GgufValue value = read_value(in, path, key);
    if (!kv_.emplace(std::string(key), std::move(value)).second)
      fail(path, ": duplicate metadata key '", key, "'");
  }

  uint64_t alignment = kDefaultAlignment;
  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_int() || a->i <= 0 || !std::has_single_bit(static_cast<uint64_t>(a->i)))
      fail(path, ": general.alignment must be a positive power of two");
    alignment = static_cast<uint64_t>(a->i);
  }

  std::vector<RawTensor> raw;
  raw.reserve(static_cast<size_t>(n_tensors));
  std::unordered_set<std::string_view> names;
  for (uint64_t t = 0; t < n_tensors; ++t) {
    raw.push_back(read_tensor_info(in, path, t));
    // string_view into raw[] would dangle on reallocation; reserve() above prevents it.
    if (!names.insert(raw.back().view.name).second)
      fail(path, ": duplicate tensor name '", raw.back().view.name, "'");
  }

  const uint64_t data_start = (static_cast<uint64_t>(in.pos()) + alignment - 1) / alignment * alignment;
  if (n_tensors > 0 && data_start > file_.size())
    fail(path, ": truncated GGUF: data section starts at ", data_start, " past the end of the file (",
         file_.size(), " bytes)");
  const uint64_t data_size = n_tensors > 0 ? file_.size() - data_start : 0;

  for (RawTensor& t : raw) {
    const std::string& name = t.view.name;
    if (t.offset % alignment != 0)
      fail(path, ": tensor '", name, "' data offset ", t.offset, " is not aligned to ", alignment);
    if (t.offset > data_size || t.view.nbytes > data_size - t.offset)
      fail(path, ": tensor '", name, "' data [", t.offset, ", +", t.view.nbytes,
           ") lies outside the data section of ", data_size, " bytes (file truncated?)");
    t.view.data = file_.data() + data_start + t.offset;
  }

  std::vector<const RawTensor*> by_offset;
  by_offset.reserve(raw.size());
  for (const RawTensor& t : raw) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const RawTensor* a, const RawTensor* b) { return a->offset < b->offset; });
  for (size_t j = 1; j < by_offset.size(); ++j) {
    const RawTensor& prev = *by_offset[j - 1];
    const RawTensor& cur = *by_offset[j];
    if (prev.offset + prev.view.nbytes > cur.offset)
      fail(path, ": tensors '", prev.view.name, "' and '", cur.view.name, "' overlap in the data section");
  }

  tensors_.reserve(raw.size());
  for (RawTensor& t : raw) tensors_.push_back(std::move(t.view));
  alignment_ = alignment;
  data_offset_ = static_cast<size_t>(data_start);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::STRING)
    fail(path(), ": metadata key '", key, "' is a ", gguf_type_name(v->type), ", expected a string");
  return v->s;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_int())
    fail(path(), ": metadata key '", key, "' is a ", gguf_type_name(v->type), ", expected an integer");
  return v->i;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_int()) return static_cast<double>(v->i);
  fail(path(), ": metadata key '", key, "' is a ", gguf_type_name(v->type), ", expected a number");
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::BOOL)
    fail(path(), ": metadata key '", key, "' is a ", gguf_type_name(v->type), ", expected a bool");
  return v->i != 0;
}

}  // namespace zen
