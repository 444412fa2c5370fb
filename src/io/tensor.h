// A view of one stored tensor: dtype, logical shape (row-major, outermost first, as in
// PyTorch/safetensors; GGUF's ne[] order is reversed on load) and the mapped bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zen {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  F64,
  I8,
  I16,
  I32,
  I64,
  U8,
  BOOL,
  F8_E4M3,
  F8_E5M2,
  // GGUF block formats (llama.cpp ggml-quants layouts).
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q8_0,
  Q4_K,
  Q5_K,
  Q6_K,
};

const char* dtype_name(DType t);
// Elements per storage block (1 for plain types, 32 or 256 for GGUF block formats).
int64_t dtype_block_elems(DType t);
// Bytes per storage block.
size_t dtype_block_bytes(DType t);
// Bytes of a row of n elements; throws if n is not a multiple of the block size.
size_t dtype_row_bytes(DType t, int64_t n);
bool dtype_is_quantized_block(DType t);

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major, outermost first
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
  int64_t rows() const;  // product of all but the last dim (1 for a vector)
  int64_t cols() const;  // last dim
  std::string shape_str() const;  // "[896, 4864]"
};

}  // namespace zen
