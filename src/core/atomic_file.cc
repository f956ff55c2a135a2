// ht::detail::AtomicFile: temporary name, fsync, rename, fsync the directory.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/files.h"
#include "ht/core/error.h"

namespace ht::detail {

AtomicFile::AtomicFile(std::string path, std::string_view what)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), what_(what) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kFileMode);
  if (fd_ < 0)
    throw IoError(ErrorKind::kIo, fmt::format("cannot create {} '{}': {}", what_, tmp_, std::strerror(errno)));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  for (std::size_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd_, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw IoError(ErrorKind::kIo, fmt::format("cannot write {} '{}' (disk full?): {}", what_, tmp_,
                                                std::strerror(n < 0 ? errno : ENOSPC)));
    done += std::size_t(n);
  }
  written_ += bytes;
}

void AtomicFile::commit() {
  const int rc = ::fsync(fd_), err = errno;
  const int closed = ::close(fd_);
  fd_ = -1;
  if (rc != 0 || closed != 0)
    throw IoError(ErrorKind::kIo, fmt::format("cannot write {} '{}' to disk: {}", what_, tmp_,
                                              std::strerror(rc != 0 ? err : errno)));
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec)
    throw IoError(ErrorKind::kIo, fmt::format("cannot rename {} '{}' into '{}': {}", what_, tmp_, path_, ec.message()));
  committed_ = true;
  // The rename itself is durable only once the directory is synced.
  sync_directory(std::filesystem::path(path_).parent_path().string());
}

}  // namespace ht::detail
