#include "base/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace zen {
namespace {

#ifdef ZEN_HEAP_MAPPED_FILES
// The fuzz build (fuzz/CMakeLists.txt): the file is read into a heap buffer of exactly its
// size. A read just past a mapping lands in the zero-filled rest of its last page unnoticed;
// past this buffer ASan reports it.
void* map(int fd, size_t size) {
  auto* p = static_cast<uint8_t*>(std::malloc(size));
  for (size_t done = 0; p != nullptr && done < size;) {
    const ssize_t n = ::read(fd, p + done, size - done);
    if (n <= 0) {
      if (n == 0) errno = EIO;
      std::free(p);
      return nullptr;
    }
    done += static_cast<size_t>(n);
  }
  return p;
}
void unmap(const uint8_t* p, size_t) { std::free(const_cast<uint8_t*>(p)); }
constexpr bool kCanDropPages = false;
#else
void* map(int fd, size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void unmap(const uint8_t* p, size_t size) { ::munmap(const_cast<uint8_t*>(p), size); }
constexpr bool kCanDropPages = true;
#endif

}  // namespace

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
    void* p = map(fd, size_);
    ::close(fd);
    if (p == nullptr) fail("cannot map ", path, ": ", std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
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

void MappedFile::drop_pages(const void* p, size_t n) const {
  if (!kCanDropPages || !contains(p, n)) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  // MAP_PRIVATE, read-only, never written: dropping pages loses nothing.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedFile::release() {
  if (data_ != nullptr) unmap(data_, size_);
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
