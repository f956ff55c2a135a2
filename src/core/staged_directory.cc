// A directory written beside its place and renamed into it when complete.
#include "core/staged_directory.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/files.h"
#include "ht/core/error.h"

namespace ht::detail {

namespace fs = std::filesystem;

StagedDirectory::StagedDirectory(const fs::path& out, std::string what) : what_(std::move(what)) {
  out_ = out.lexically_normal();
  if (out_.filename().empty()) out_ = out_.parent_path();
  HT_CHECK(!out_.empty() && out_.filename() != "." && out_.filename() != "..", ErrorKind::kConfig,
           "{} '{}': name the directory by a path that ends in its own name", what_, out.string());
  const fs::path parent = out_.has_parent_path() ? out_.parent_path() : fs::path(".");
  if (const std::error_code made = make_directories(parent))
    throw IoError(ErrorKind::kIo, fmt::format("cannot create the directory '{}' for {} '{}': {}", parent.string(),
                                              what_, out_.string(), made.message()));
  const std::string name = out_.filename().string();
  staging_ = parent / ("." + name + ".partial");
  old_ = parent / ("." + name + ".old");
  std::error_code ec;
  fs::remove_all(staging_, ec);  // a crash's leftover
  if (::mkdir(staging_.c_str(), kDirMode) != 0)
    throw IoError(ErrorKind::kIo,
                  fmt::format("cannot create '{}' for {} '{}': {} (it is written beside its place and renamed into "
                              "it when complete: '{}' must be writable)",
                              staging_.string(), what_, out_.string(), std::strerror(errno), parent.string()));
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void StagedDirectory::commit(bool replace) {
  const auto io_error = [&](const std::string& what) { throw IoError(ErrorKind::kIo, what); };
  sync_directory(staging_.string());
  std::error_code ec;
  // A rename over nothing or over an empty directory is atomic; replacing
  // moves the old one aside first.
  if (replace && fs::exists(out_, ec)) {
    fs::remove_all(old_, ec);
    fs::rename(out_, old_, ec);
    if (ec) io_error(fmt::format("cannot move the old {} '{}' aside: {}", what_, out_.string(), ec.message()));
  }
  fs::rename(staging_, out_, ec);
  if (ec)
    io_error(fmt::format("cannot rename '{}' to '{}': {}", staging_.string(), out_.string(), ec.message()));
  committed_ = true;
  sync_directory(out_.has_parent_path() ? out_.parent_path().string() : ".");
  if (replace) fs::remove_all(old_, ec);
}

}  // namespace ht::detail
