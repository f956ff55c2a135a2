// Directories and files of a run and its checkpoints, created without group
// or world write whatever the process's umask: directories 0755, files 0644
// (a stricter umask still applies; a looser one, 000 say, no longer opens them).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "ht/core/error.h"

namespace ht::detail {

inline constexpr mode_t kDirMode = 0755;
inline constexpr mode_t kFileMode = 0644;

/// Creates `path` and its missing parents with mode kDirMode (those that
/// exist keep theirs). Returns the error; none when `path` is a directory now.
inline std::error_code make_directories(const std::filesystem::path& path) {
  std::filesystem::path prefix;
  for (const std::filesystem::path& part : path) {
    prefix /= part;
    if (part.empty() || part == "." || part == "..") continue;
    if (::mkdir(prefix.c_str(), kDirMode) == 0) continue;
    // An existing directory is fine (a read-only file system or an
    // unwritable parent may say so with EROFS or EACCES rather than EEXIST).
    const int err = errno;
    struct stat st{};
    if (::stat(prefix.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {err, std::generic_category()};
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec) && !ec) ec = std::make_error_code(std::errc::not_a_directory);
  return ec;
}

/// Writes `text` to `path` (created with kFileMode, or truncated), synced to
/// disk when `sync`. Throws IoError naming `what` and the path.
inline void write_file(const std::string& path, std::string_view text, bool sync, std::string_view what) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kFileMode);
  HT_CHECK(fd >= 0, ErrorKind::kIo, "cannot create {} '{}': {}", what, path, std::strerror(errno));
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    const int err = errno;
    if (n <= 0) ::close(fd);
    HT_CHECK(n > 0, ErrorKind::kIo, "cannot write {} '{}' (disk full?): {}", what, path, std::strerror(err));
    done += std::size_t(n);
  }
  const int rc = sync ? ::fsync(fd) : 0, err = errno;
  HT_CHECK(::close(fd) == 0 && rc == 0, ErrorKind::kIo, "cannot write {} '{}' to disk: {}", what, path,
           std::strerror(rc != 0 ? err : errno));
}

/// Writes `text` to `path` through `path`.tmp and a rename: a reader sees the
/// old contents or the new, never half of them. Throws IoError naming `what`.
inline void write_file_replacing(const std::string& path, std::string_view text, bool sync, std::string_view what) {
  const std::string tmp = path + ".tmp";
  write_file(tmp, text, sync, what);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  HT_CHECK(!ec, ErrorKind::kIo, "cannot rename {} '{}' into '{}': {}", what, tmp, path, ec.message());
}

/// Syncs a directory, so that renames into it are durable; best effort (a
/// file system that cannot sync a directory is left as it is).
inline void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

/// Replaces whatever is at `path` by an empty file of mode kFileMode, for a
/// library that creates files itself with 0666 (HDF5): truncating it keeps the mode.
inline void create_empty_file(const std::string& path) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kFileMode);
  HT_CHECK(fd >= 0, ErrorKind::kIo, "cannot create '{}': {}", path, std::strerror(errno));
  ::close(fd);
}

}  // namespace ht::detail
