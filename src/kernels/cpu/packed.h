// Row-interleaved ("x8") weights for the AVX2 integer GEMM/GEMV.
//
// A quantized weight matrix is rewritten once, at load, into groups of 8 rows whose quants
// are interleaved 4 bytes at a time: one 32-byte register holds 4 consecutive elements of
// each of the 8 rows. A maddubs of that register with 4 activation bytes broadcast to all
// lanes leaves each row's partial sum in its own lane, so the 8 results of a block come out
// already separated by row: no horizontal reductions, and a block of 32 elements x 8 rows
// costs 8 maddubs plus a few adds per token (the per-row layout costs about 3x more
// instructions). A group is one contiguous stream, which also suits decode: one sequential
// read instead of 8 interleaved row streams. (llama.cpp's "repack" CPU buffers use the
// same idea.)
//
// Arithmetic, identical in the scalar reference and the AVX2 kernels, for every (row, token):
// each block's integer dot product is exact (int32), then one f32 multiply of the two scales
// and one FMA per block (two for Q4_K: scale and minimum), blocks in order. So a result does
// not depend on how many tokens share the call: batch-invariant, and the reference checks the
// kernels bit for bit. Scales and quants are exactly those of the source blocks.
//
// Packed formats and their source dtypes (the size of a group is 8 x the source row, plus
// 2.8% for Q4_K's unpacked 6-bit scales):
//   Q8_0, Q4_0, Q5_0 -> blocks of 32 against Q8_0 activations (+ their block sums)
//   Q4_K, Q6_K       -> super-blocks of 256 against Q8_K activations
//   NVFP4 (ModelOpt) -> blocks of 32 (two groups of 16) against Q8_0 activations; dtype() is U8,
//                       the stored dtype of NVFP4 codes. Its products are integers too: each
//                       E2M1 value doubled is an integer (0..12), so a group is one exact int
//                       dot, times its E4M3 scale; weight_scale_2 multiplies the finished sum.
//                       The source is 4.5 bits a weight and so is the packed copy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/thread_pool.h"
#include "io/tensor.h"
#include "kernels/cpu/nvfp4.h"

namespace zen::kernels {
namespace avx2 {
struct PackedProblem;
}

class PackedMatrix {
 public:
  // Whether `dtype` has a packed form, and whether this CPU runs the packed kernels (AVX2;
  // elsewhere the per-row kernels stay in use, with their own SIMD paths).
  static bool supports(DType dtype);
  static bool available();
  // The instruction set the packed kernels run with here: "avx512vnni", "avxvnni", "avx2",
  // or "none" (not x86, or no AVX2).
  static const char* isa();

  // Interleaves w ([rows, k] in a supported dtype); rows are padded to a multiple of 8 with
  // zero blocks. Throws zen::Error for unsupported dtypes or a short tensor.
  static PackedMatrix pack(const TensorView& w);
  // The same bytes, built element by element from the layout definitions (tests).
  static PackedMatrix pack_reference(const TensorView& w);
  // NVFP4: needs cols a multiple of 32 (nvfp4_packable). Throws zen::Error naming `name` for
  // a NaN scale code (the integer path has no NaN; the file is broken) or a bad shape.
  static bool nvfp4_packable(const Nvfp4Matrix& w) { return w.cols > 0 && w.cols % 32 == 0; }
  static PackedMatrix pack_nvfp4(const Nvfp4Matrix& w, const std::string& name);
  static PackedMatrix pack_nvfp4_reference(const Nvfp4Matrix& w, const std::string& name);

  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return k_; }
  size_t bytes() const { return n_groups_ * group_bytes_; }
  const uint8_t* data() const { return data_.get(); }

  // y[t, n] = sum_k W[n, k] * x[t, k]; x: [T, K] f32, y: [T, N] f32. Batch-invariant.
  void matmul(const float* x, int64_t n_tokens, float* y, ThreadPool& pool) const;
  // x86: the kernels' arguments for x (activations quantized into this thread's scratch, valid
  // until its next matmul), so a test can run a chosen instruction set's kernels on them.
  // A pool shares the quantization of a batch's rows out.
  avx2::PackedProblem problem(const float* x, int64_t n_tokens, float* y, ThreadPool* pool = nullptr) const;
  // The same arithmetic in scalar code (tests; the kernels must match it bit for bit).
  void matmul_reference(const float* x, int64_t n_tokens, float* y) const;
  // Row `row` in f32, bit for bit kernels::dequantize_row of the source row (the packing is
  // undone block by block), so a tied embedding can read its rows here instead of faulting
  // the released file pages back in. GGUF formats only (not NVFP4).
  void dequantize_row(int64_t row, float* out) const;

 private:
  template <typename PackBlock>
  static PackedMatrix pack_with(DType dtype, int64_t rows, int64_t k, const PackBlock& pack_block);

  DType dtype_ = DType::F32;
  int64_t rows_ = 0, k_ = 0;
  float out_scale_ = 1.0f;  // NVFP4: weight_scale_2 times the kernels' fixed factors
  size_t n_groups_ = 0, group_bytes_ = 0;
  std::unique_ptr<uint8_t[]> data_;  // [n_groups][group_bytes]
};

}  // namespace zen::kernels
