// Private: a file written whole or not at all. Bytes go to "<path>.tmp";
// commit() syncs them, renames the file to `path` and syncs the directory, so
// a crash at any moment leaves either no file under `path` or a complete one
// (a reader never finds a half-written file that looks complete).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ht::detail {

class AtomicFile {
 public:
  /// Creates "<path>.tmp" (mode 0644, replacing a leftover). `what` names
  /// the kind of file in errors. Throws IoError.
  AtomicFile(std::string path, std::string_view what);
  /// Removes the temporary file unless commit() succeeded. Never throws.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `bytes`. Throws IoError naming the file (disk full, ...).
  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// Bytes written so far.
  std::size_t written() const { return written_; }
  /// fsync, close, rename to the final path, fsync the directory. Throws IoError.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_; }

 private:
  std::string path_, tmp_, what_;
  int fd_ = -1;
  std::size_t written_ = 0;
  bool committed_ = false;
};

}  // namespace ht::detail
