// Canonical weights digest ("zen-weights-v1"): one SHA-256 leaf per tensor over a fixed
// encoding of (name, dtype, shape, bytes), leaves sorted by name, an RFC 6962 Merkle root over
// them. The root ignores how a checkpoint is stored (sharding, file order, header padding,
// __metadata__, safetensors vs GGUF for the same tensors) and changes with any bit of any
// tensor, a rename, a dtype or a shape. Also the plain SHA-256 of each weight, config and
// tokenizer file (what sha256sum and Hugging Face's LFS ids show).
//
// Leaf encoding, version 1 (integers unsigned 64-bit little-endian):
//   "zen-weights-v1" 0x00
//   len(name)  name        (bytes as stored, UTF-8)
//   len(dtype) dtype       (ASCII: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2
//                           as safetensors spells them; GGUF's plain types map to the same
//                           names, its block types keep ggml's: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
//                           Q4_K Q5_K Q6_K)
//   ndim  dim_0 .. dim_{ndim-1}   (logical shape in elements, outermost first: GGUF's ne[]
//                                  reversed, so a GGUF [ne0=4, ne1=3] tensor is [3, 4])
//   nbytes  raw bytes      (the stored bytes, row-major, little-endian as both formats store)
// leaf = SHA-256(0x00 || encoding); node = SHA-256(0x01 || left || right); the root of n
// sorted leaves is the leaf when n = 1, else node(root(first k), root(rest)) with k the
// largest power of two below n (RFC 6962 section 2.1). Names sort by their bytes.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attest/crypto.h"
#include "io/tensor.h"

namespace zen::attest {

inline constexpr const char* kCanonicalization = "zen-weights-v1";

struct TensorLeaf {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  Digest leaf{};
};

struct FileDigest {
  std::string path;  // relative to the model folder (the file name for a single file)
  std::string role;  // "weights", "config" or "tokenizer"
  uint64_t bytes = 0;
  Digest sha256{};
};

struct WeightsDigest {
  std::string canonicalization = kCanonicalization;
  std::string format;  // "safetensors" or "gguf"
  Digest root{};
  std::vector<TensorLeaf> tensors;  // sorted by name
  std::vector<FileDigest> files;    // weight files first, then config and tokenizer files
  uint64_t tensor_bytes = 0;
  // Measured, not part of the manifest.
  double seconds = 0;
  int threads = 1;

  nlohmann::json to_json() const;
  // A manifest written by to_json(); throws zen::Error naming the field for anything
  // malformed (wrong types, bad hex, unknown canonicalization, unsorted or repeated names).
  static WeightsDigest from_json(const nlohmann::json& j, const std::string& what);
};

struct DigestOptions {
  int threads = 0;            // 0: all cores
  bool weight_files = true;   // also the plain SHA-256 of each whole weight file
  // Checked between tensors and every 64 MiB: once true, digest_weights stops and throws (a
  // server shutting down must not leave a hashing thread running into libcrypto's exit).
  const std::atomic<bool>* cancel = nullptr;
};

// PATH: a Hugging Face folder (model.safetensors, or the shards its index names, else every
// *.safetensors in it), a .safetensors file, or a .gguf file. Tensors are hashed in parallel,
// largest first. Throws zen::Error for anything that is not a readable checkpoint.
WeightsDigest digest_weights(const std::string& path, const DigestOptions& options = {});

Digest tensor_leaf(const TensorView& t);
Digest merkle_root(const std::vector<Digest>& sorted_leaves);  // needs at least one leaf

// What differs between an expected manifest and a computed digest: one line per tensor that
// differs, is missing or is extra, and per config/tokenizer file of the manifest that differs
// or is missing. Empty when they agree (weight files' plain hashes are informational: a
// resharded checkpoint has new ones and the same root).
std::vector<std::string> compare_manifest(const WeightsDigest& expected, const WeightsDigest& actual);

// Config and tokenizer files of a record (manifest or attestation) against those computed:
// each that differs or is missing, and each present that the record does not cover (a
// generation_config.json or chat template added later changes what the model does).
std::vector<std::string> compare_side_files(const std::vector<FileDigest>& recorded, const WeightsDigest& actual,
                                            const std::string& record);

// llama.cpp's `llama-gguf-hash --sha256` lines for a GGUF: one per tensor in file order
// ("sha256    HEX  FILE:NAME"), then the whole model's ("sha256    HEX  FILE").
std::vector<std::string> gguf_hash_lines(const std::string& gguf_path);

}  // namespace zen::attest
