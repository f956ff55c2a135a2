// Private: a memory snapshot's raw image — every piece's f32 values back to
// back in one file of node-local shared memory, mapped and written in place.
//
// A snapshot goes over the bytes twice: the host copy writes the training
// state into the image's pages (computing each piece's checksum as it
// copies), and the replication sends the peer those same pages, which it
// receives into its own image. The pages are a reused file's (the older of
// the two snapshots kept becomes the next one), so they are faulted in once,
// not at every snapshot. The commit point and the checksums are the disk
// checkpoints': manifest.json beside the image, in a step directory renamed
// into place (memory_tier.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ht/core/tensor.h"

namespace ht::ckpt::detail {

/// Copies `bytes` from `src` to `dst` and returns checksum64 of them (the
/// same value), reading the source once.
std::uint64_t copy_checksum64(void* dst, const void* src, std::size_t bytes);

/// The image file of rank `rank`'s snapshot in a step directory.
std::string snapshot_file_name(int rank);

/// Where each piece of `piece_bytes` goes in an image (64-byte aligned, in
/// order) and the image's size (a multiple of 4 bytes).
struct ImageLayout {
  std::vector<std::int64_t> offsets;
  std::int64_t bytes = 0;
};
ImageLayout image_layout(const std::vector<std::int64_t>& piece_bytes);

/// A file mapped read-write and shared (tmpfs: its pages are the file).
/// Move-only; unmapped and closed when the last reference (a tensor view
/// included) goes.
class MappedFile {
 public:
  /// Opens (creating) `path`, makes it `bytes` long and maps it with its
  /// pages faulted in now (a reused file's are there already); with `touch`,
  /// also writes every page once, so that the mapping takes writes at memory
  /// speed from then on (a mapping's first write of each page is slow:
  /// memory_tier.cc). Throws IoError naming the path (no space in the
  /// tmpfs, say).
  static std::shared_ptr<MappedFile> open(const std::string& path, std::int64_t bytes, bool touch = false);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  char* data() const { return static_cast<char*>(data_); }
  std::int64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, int fd, void* data, std::int64_t bytes)
      : path_(std::move(path)), fd_(fd), data_(data), bytes_(bytes) {}

  std::string path_;
  int fd_ = -1;
  void* data_ = nullptr;
  std::int64_t bytes_ = 0;
};

/// A host tensor of `count` elements of `dtype` over `file`'s bytes from
/// `offset` on, keeping the mapping alive.
Tensor view_of(const std::shared_ptr<MappedFile>& file, std::int64_t offset, std::int64_t count, DType dtype);

}  // namespace ht::ckpt::detail
