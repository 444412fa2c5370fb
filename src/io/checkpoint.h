// One tensor directory over a checkpoint in any supported layout, with a ledger of what the
// model consumed. Layouts:
//   - a Hugging Face folder: config.json, model.safetensors or model.safetensors.index.json
//     (shards), optional generation_config.json, tokenizer.json, tokenizer_config.json;
//   - a single .safetensors file with config.json beside it;
//   - a .gguf file (config and tokenizer come from its metadata).
// Strict loading: the model take()s every tensor it needs; ignore() names tensors the model
// deliberately skips, with a reason; verdict() then lists missing, mismatched and unexpected
// tensors, and require_clean() throws when any exist.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/safetensors.h"
#include "io/tensor.h"

namespace zen {

enum class CheckpointFormat { HfFolder, SafetensorsFile, Gguf };

struct LoadVerdict {
  std::vector<std::string> missing;     // needed by the architecture, absent
  std::vector<std::string> mismatched;  // present with the wrong shape or dtype (with details)
  std::vector<std::string> unexpected;  // present, neither consumed nor ignored
  std::vector<std::string> ignored;     // "name: reason"
  bool ok() const { return missing.empty() && mismatched.empty() && unexpected.empty(); }
  std::string to_string() const;  // human-readable, one name per line
};

class Checkpoint {
 public:
  static std::unique_ptr<Checkpoint> open(const std::string& path);  // throws zen::Error

  CheckpointFormat format() const { return format_; }
  const std::string& path() const { return path_; }
  // Folder holding config/tokenizer files (the HF folder, or the .safetensors' folder);
  // empty for GGUF.
  const std::string& folder() const { return folder_; }
  const nlohmann::json& hf_config() const { return hf_config_; }  // null for GGUF
  const GgufFile* gguf() const { return gguf_.get(); }            // null unless GGUF

  bool has(const std::string& name) const;
  const TensorView* peek(const std::string& name) const;  // no ledger entry
  // Marks the tensor consumed and returns it; records it as missing and returns nullptr if
  // absent; records a mismatch if expected_shape is non-empty and differs.
  const TensorView* take(const std::string& name, const std::vector<int64_t>& expected_shape = {});
  // Records `name` as missing without looking it up (for optional/required logic in callers).
  void note_missing(const std::string& name);
  void note_mismatch(const std::string& detail);
  // Marks every tensor whose name matches `pattern` as deliberately ignored.
  void ignore(const std::string& pattern, const std::string& reason);
  LoadVerdict verdict() const;
  void require_clean() const;  // throws zen::Error with verdict().to_string()

  // Drops the pages of a tensor of this checkpoint from the resident set (after the model
  // copied it into another layout); a no-op for memory that is not this checkpoint's.
  void release_pages(const TensorView& t) const;
  // Once loading is done: drops again the pages of every tensor given to release_pages (a
  // later read of its neighbour in the file can map a whole page-cache folio, up to 2 MB,
  // that overlaps it) and the GGUF metadata's (read by the config and the tokenizer). Only
  // residency changes: a later read of those bytes maps them back in from the page cache.
  void release_loader_pages() const;

  std::vector<std::string> tensor_names() const;  // sorted
  size_t total_bytes() const;                     // bytes of all tensor data

 private:
  Checkpoint() = default;
  void open_hf_folder();          // opens model.safetensors or the indexed shards
  void check_weight_map() const;  // every index entry lives in the shard it names
  CheckpointFormat format_ = CheckpointFormat::HfFolder;
  std::string path_;
  std::string folder_;
  nlohmann::json hf_config_;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::unordered_map<std::string, const TensorView*> by_name_;
  std::unordered_map<std::string, bool> consumed_;
  std::vector<std::pair<std::string, std::string>> ignored_;  // name, reason
  std::vector<std::string> missing_;
  std::vector<std::string> mismatched_;
  std::map<std::string, std::string> weight_map_;  // tensor -> shard file (sharded folders)
  mutable std::vector<const TensorView*> released_;  // given to release_pages
};

}  // namespace zen
