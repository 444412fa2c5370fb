// A projection matrix in whatever format the checkpoint stores it, bound from the checkpoint
// ledger together with its scale tensors, and its product with f32 activations.
//
// Formats, decided per tensor from the STORED dtype of `<module>.weight` (checked against what
// the quantization config declares for the module):
//   plain    F32/F16/BF16 or a GGUF block type    -> kernels::matmul
//   Fp8      F8_E4M3 [N, K] + weight_scale (f32 scalar), ModelOpt "FP8"
//   Fp8Block F8_E4M3 [N, K] + weight_scale_inv [ceil(N/bn), ceil(K/bk)], quant_method "fp8"
//            with weight_block_size [bn, bk] (Qwen / DeepSeek FP8 releases)
//   Nvfp4    U8 [N, K/2] + weight_scale F8_E4M3 [N, K/16] + weight_scale_2 (f32 scalar),
//            ModelOpt "NVFP4" (group size 16)
// ModelOpt's input_scale (a static activation scale) is consumed and validated but not
// applied: activations stay f32, the reference being the dequantized-weight model.
// A BF16 weight of a module the config declares quantized (e.g. an `mtp.fc` missing from
// exclude_modules) is taken as the BF16 it is.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "dist/tensor_parallel.h"
#include "io/checkpoint.h"
#include "io/tensor.h"
#include "kernels/cpu/packed.h"

namespace zen {

enum class QuantAlgo : uint8_t { None, Fp8, Fp8Block, Nvfp4 };
const char* quant_algo_name(QuantAlgo a);

// The checkpoint's quantization metadata: ModelOpt's hf_quant_config.json ("quantization":
// quant_algo, group_size, exclude_modules, quantized_layers for MIXED_PRECISION) or the
// "quantization_config" of config.json (quant_method "modelopt" or "fp8").
struct QuantConfig {
  QuantAlgo algo = QuantAlgo::None;           // for modules neither listed nor excluded
  std::map<std::string, QuantAlgo> layers;    // MIXED_PRECISION: module -> algorithm
  std::vector<std::string> exclude;           // glob patterns over module names
  int64_t block_rows = 128, block_cols = 128;  // Fp8Block tile
  std::string source;                         // file the config came from (messages)
  bool nvfp4_exact_activations = false;       // LoadOptions' choice: NVFP4 keeps f32 activations

  // What the config says about one module ("model.layers.0.mlp.down_proj").
  QuantAlgo declared_for(const std::string& module) const;

  // Reads hf_quant_config.json beside the checkpoint if present, else config.json's
  // quantization_config; an empty config for GGUF or unquantized checkpoints. Throws
  // zen::Error for unknown algorithms or methods and group sizes other than 16.
  static QuantConfig from_checkpoint(const Checkpoint& ckpt);
  static QuantConfig from_hf_quant_config(const nlohmann::json& file, const std::string& source);
  static QuantConfig from_quantization_config(const nlohmann::json& qc, const std::string& source);
};

// Shell-style glob ('*' any run, '?' one character), as ModelOpt's exclude_modules use.
bool glob_match(const std::string& pattern, const std::string& text);

enum class LinearFormat : uint8_t { Invalid, Plain, Fp8, Fp8Block, Nvfp4 };
const char* linear_format_name(LinearFormat f);

struct Linear {
  LinearFormat format = LinearFormat::Invalid;  // Invalid: binding failed (see the ledger)
  std::string name;                             // the weight tensor's name
  int64_t rows = 0, cols = 0;                   // logical [N, K]
  const TensorView* weight = nullptr;           // as stored (see the header comment)
  const TensorView* group_scales = nullptr;     // Nvfp4: weight_scale F8_E4M3 [N, K/16]
  std::vector<float> block_scales;              // Fp8Block: [ceil(N/bn), ceil(K/bk)]
  int64_t block_rows = 0, block_cols = 0;       // Fp8Block tile
  float scale = 1.0f;                           // Fp8: weight_scale; Nvfp4: weight_scale_2
  float input_scale = 0.0f;                     // ModelOpt static input scale; 0 when absent
  bool exact_activations = false;               // Nvfp4: never packed (f32 activations)
  // Plain block formats with a row-interleaved form, on CPUs that run it: the weights in that
  // layout (matmul and dequantize_row read only this: a tied embedding shares its lm_head's).
  std::shared_ptr<const kernels::PackedMatrix> packed;
  // A slice (bind_slice) owns its bytes and views; null for tensors read from the file.
  std::shared_ptr<const void> owned;

  bool valid() const { return format != LinearFormat::Invalid; }

  // Takes `weight_name` ([N, K] = shape) and the scale tensors its format needs from the
  // ledger. Problems (absent tensors, wrong shapes or dtypes, a stored dtype that contradicts
  // the config) are recorded in the ledger naming the tensor, and the result is Invalid.
  // `use`: Matmul rewrites supported block formats, and NVFP4 unless the config asks for exact
  // activations, into the row-interleaved layout (`packed`); Rows (embedding tables, read a
  // row at a time) keeps the file's layout only.
  enum class Use : uint8_t { Matmul, Rows };
  static Linear bind(Checkpoint& ckpt, const std::string& weight_name, std::vector<int64_t> shape,
                     const QuantConfig& quant, Use use = Use::Matmul);
  // Rows x cols of the matrix `weight_name` (whole shape [N, K] = shape), bound as bind() binds
  // it and copied into memory of its own: a tensor-parallel rank's share. Column bounds must
  // fall on the format's blocks (a GGUF block, an NVFP4 pair of groups, an FP8 scale tile;
  // the end may be K); throws zen::Error naming the tensor and the block when they do not.
  // A packed slice keeps only its packed copy. The file pages read are released.
  static Linear bind_slice(Checkpoint& ckpt, const std::string& weight_name, std::vector<int64_t> shape,
                           const QuantConfig& quant, dist::Range rows, dist::Range cols, Use use = Use::Matmul);
  // The same with several row (and column) ranges, stacked in the given order (a Gated
  // DeltaNet rank's q, k and v channels of its heads; its value heads in llama.cpp's tiled order).
  static Linear bind_slice(Checkpoint& ckpt, const std::string& weight_name, std::vector<int64_t> shape,
                           const QuantConfig& quant, const std::vector<dist::Range>& rows, dist::Range cols,
                           Use use = Use::Matmul);
  static Linear bind_slice(Checkpoint& ckpt, const std::string& weight_name, std::vector<int64_t> shape,
                           const QuantConfig& quant, const std::vector<dist::Range>& rows,
                           const std::vector<dist::Range>& cols, Use use = Use::Matmul);
  // Rows x cols of a Linear bound as stored (bind with Use::Rows, or a view of a stacked
  // tensor), copied as bind_slice copies them; c is the checkpoint the view's pages come from.
  static Linear slice(const Checkpoint& c, const Linear& full, const std::vector<dist::Range>& rows,
                      const std::vector<dist::Range>& cols, Use use = Use::Matmul);
  // The column granularity a slice of `weight_name` must keep: the GGUF block, 32 for NVFP4,
  // the scale tile for block-scaled FP8, else 1 (also when the tensor is absent).
  static int64_t column_block(const Checkpoint& ckpt, const std::string& weight_name, const QuantConfig& quant);
  // Packs the weight for matmul if its format has a packed form and it is not packed yet (a
  // tied lm_head bound as the embedding's Rows). The checkpoint must be the one bound from.
  void prepare_matmul(const Checkpoint& ckpt);
  // A plain F32 / F16 / BF16 matrix requantized to Q8_0 (ggml's weight rounding) and packed for
  // the int8 kernels, where the CPU has them: for drafters, whose exactness only moves
  // acceptance, never output. False (nothing changed) when not applicable.
  bool requantize_q8_0();

  // Whether bind() rewrites supported block formats into the row-interleaved layout (default:
  // on where kernels::PackedMatrix::available(); ZEN_PACKED_WEIGHTS=0 turns it off, for A/B
  // benchmarks against the per-row kernels).
  static bool packing_enabled();

  // y[t, n] = sum_k W[n, k] * x[t, k]; x: [T, K] f32, y: [T, N] f32. Batch-invariant.
  void matmul(const float* x, int64_t n_tokens, float* y, ThreadPool& pool) const;
  // Row `row` of W in f32: out[K] (embedding lookups).
  void dequantize_row(int64_t row, float* out) const;
};

}  // namespace zen
