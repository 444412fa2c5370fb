#include "io/tensor.h"

#include <sstream>

#include "base/error.h"

namespace zen {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I8: return "I8";
    case DType::I16: return "I16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E5M2: return "F8_E5M2";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q5_0: return "Q5_0";
    case DType::Q5_1: return "Q5_1";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
  }
  return "?";
}

int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0: return 32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return 256;
    default: return 1;
  }
}

size_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::I8: return 1;
    case DType::I16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::BOOL: return 1;
    case DType::F8_E4M3: return 1;
    case DType::F8_E5M2: return 1;
    case DType::Q4_0: return 2 + 16;
    case DType::Q4_1: return 2 + 2 + 16;
    case DType::Q5_0: return 2 + 4 + 16;
    case DType::Q5_1: return 2 + 2 + 4 + 16;
    case DType::Q8_0: return 2 + 32;
    case DType::Q4_K: return 2 + 2 + 12 + 128;
    case DType::Q5_K: return 2 + 2 + 12 + 32 + 128;
    case DType::Q6_K: return 128 + 64 + 16 + 2;
  }
  return 0;
}

bool dtype_is_quantized_block(DType t) { return dtype_block_elems(t) > 1; }

size_t dtype_row_bytes(DType t, int64_t n) {
  const int64_t be = dtype_block_elems(t);
  if (n < 0 || n % be != 0)
    fail("row of ", n, " elements is not a multiple of the ", dtype_name(t), " block size ", be);
  return static_cast<size_t>(n / be) * dtype_block_bytes(t);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorView::rows() const {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t TensorView::cols() const { return shape.empty() ? 1 : shape.back(); }

std::string TensorView::shape_str() const {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

}  // namespace zen
