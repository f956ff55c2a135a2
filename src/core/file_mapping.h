// Private: read-only memory maps of whole files. The readers of large files
// (safetensors checkpoints, token shards) map a file once and touch only the
// pages of the bytes they copy out, so a rank reading its shard of a tensor,
// or a window of a token shard, never reads the rest of the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ht::detail {

class FileMapping {
 public:
  /// Maps `path` read-only; `what` names the kind of file in errors ("safetensors
  /// file"). An empty file maps to no bytes (data() null). Throws IoError
  /// naming the path when it cannot be opened, is not a regular file or cannot
  /// be mapped. The mapping is private and read-only: a file truncated by
  /// someone else while mapped faults (SIGBUS) on the missing pages, as with
  /// any mapped reader; the writers of these formats never truncate in place
  /// (they write another name and rename).
  static std::shared_ptr<const FileMapping> open(const std::string& path, std::string_view what);
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  const std::byte* data() const { return data_; }
  std::int64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  FileMapping(std::string path, const std::byte* data, std::int64_t bytes)
      : path_(std::move(path)), data_(data), bytes_(bytes) {}
  std::string path_;
  const std::byte* data_ = nullptr;
  std::int64_t bytes_ = 0;
};

}  // namespace ht::detail
