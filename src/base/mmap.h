// Read-only memory-mapped file. Weights stay in the page cache, never copied.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace zen {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws zen::Error naming the path
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool contains(const void* p, size_t n) const;
  // Tells the kernel that [p, p + n) (inside this mapping) will not be read soon: its whole
  // pages leave this process's resident set (they stay in the page cache, and a later read
  // maps them back in). For weights that were copied into another layout at load.
  void drop_pages(const void* p, size_t n) const;

 private:
  void release();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Whole file into a string (small text files: config.json, tokenizer.json).
std::string read_text_file(const std::string& path);
bool file_exists(const std::string& path);
bool is_directory(const std::string& path);

}  // namespace zen
