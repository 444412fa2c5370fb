// Safetensors reader: 8-byte little-endian header length, JSON header, raw data. Tensors are
// views into the mapped file. Header and offsets are validated (in range, consistent with
// dtype x shape, no overlap); a malformed file throws zen::Error, never crashes.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "base/mmap.h"
#include "io/tensor.h"

namespace zen {

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws zen::Error

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // __metadata__
  const std::string& path() const { return file_.path(); }
  size_t file_size() const { return file_.size(); }
  const MappedFile& file() const { return file_; }

 private:
  MappedFile file_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace zen
