// The fuzz build's MappedFile: the file is read into a heap buffer of exactly its size
// instead of being mmap'ed. A read one byte past a mapping lands in the zero-filled rest of
// its last page and goes unnoticed; past this buffer ASan reports it. Linked into every
// target ahead of zen_fuzz_core, so the linker never pulls src/base/mmap.cc's object from the
// archive: this file must define every symbol that object does (the same API, same errors),
// or the link fails with duplicate symbols (then update it from src/base/mmap.cc).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/mmap.h"

namespace zen {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file: ", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = nullptr;
    // 64-byte aligned like the start of a page-aligned mapping for anything that checks.
    if (::posix_memalign(&p, 64, size_) != 0) {
      ::close(fd);
      fail("cannot map ", path, ": out of memory");
    }
    size_t done = 0;
    while (done < size_) {
      const ssize_t n = ::read(fd, static_cast<uint8_t*>(p) + done, size_ - done);
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        std::free(p);
        ::close(fd);
        fail("cannot map ", path, ": ", std::strerror(err));
      }
      done += static_cast<size_t>(n);
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

bool MappedFile::contains(const void* p, size_t n) const {
  const auto* b = static_cast<const uint8_t*>(p);
  return data_ != nullptr && b >= data_ && n <= size_ && static_cast<size_t>(b - data_) <= size_ - n;
}

void MappedFile::drop_pages(const void*, size_t) const {}  // nothing to drop in a heap copy

void MappedFile::release() {
  std::free(const_cast<uint8_t*>(data_));
  data_ = nullptr;
  size_ = 0;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace zen
