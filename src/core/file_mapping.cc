// ht::detail::FileMapping: mmap(2) of a whole file, read-only.
#include "core/file_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ht/core/error.h"

namespace ht::detail {

std::shared_ptr<const FileMapping> FileMapping::open(const std::string& path, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(ErrorKind::kIo, fmt::format("cannot open {} '{}': {}", what, path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    throw IoError(ErrorKind::kIo, fmt::format("{} '{}' is not a regular file{}", what, path,
                                              err ? fmt::format(": {}", std::strerror(err)) : std::string()));
  }
  const std::int64_t bytes = st.st_size;
  void* data = nullptr;
  if (bytes > 0) {
    data = ::mmap(nullptr, std::size_t(bytes), PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw IoError(ErrorKind::kIo,
                    fmt::format("cannot map {} '{}' ({} bytes): {}", what, path, bytes, std::strerror(err)));
    }
  }
  ::close(fd);  // the mapping keeps the file open
  return std::shared_ptr<const FileMapping>(new FileMapping(path, static_cast<const std::byte*>(data), bytes));
}

FileMapping::~FileMapping() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), std::size_t(bytes_));
}

}  // namespace ht::detail
