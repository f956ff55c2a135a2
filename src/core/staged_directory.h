// Private: a directory written whole or not at all. Its files go to
// "<parent>/.<name>.partial" beside the final place; commit() syncs the
// staging directory and renames it into place, so a reader finds nothing,
// the old directory, or the new one complete; never a half-written one.
#pragma once

#include <filesystem>
#include <string>

namespace ht::detail {

class StagedDirectory {
 public:
  /// Creates the staging directory of `out` (its parent too; a crash's
  /// leftover staging directory is removed first). `out` must name a
  /// directory by a path that ends in its own name. `what` names the
  /// directory in errors. Throws IoError.
  StagedDirectory(const std::filesystem::path& out, std::string what);
  /// Removes the staging directory and what it holds unless commit()
  /// succeeded. Never throws.
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  /// Where to write the files.
  const std::filesystem::path& path() const { return staging_; }
  /// Syncs the staging directory and renames it to `out`, which must be
  /// missing or empty; with `replace`, a directory at `out` is moved aside
  /// first and removed after, so `out` is always the old directory or the
  /// new. Syncs the parent. Throws IoError.
  void commit(bool replace = false);

 private:
  std::filesystem::path out_, staging_, old_;
  std::string what_;
  bool committed_ = false;
};

}  // namespace ht::detail
