// A memory snapshot's raw image: the mapped file, its layout, the fused copy and checksum.
#include "ckpt/snapshot_image.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ht/core/error.h"
#include "ht/core/fnv.h"

namespace ht::ckpt::detail {

std::uint64_t copy_checksum64(void* dst, const void* src, std::size_t bytes) {
  // checksum64's four FNV-1a lanes over interleaved 8-byte words, fed from
  // the words as they are copied (ckpt/checkpoint.h gives the algorithm;
  // both must agree bit for bit).
  const auto* p = static_cast<const unsigned char*>(src);
  auto* q = static_cast<unsigned char*>(dst);
  // The lanes start from FNV's offset and three rotations of it.
  std::uint64_t lane[4] = {kFnvOffset ^ std::uint64_t(bytes), 0x84222325cbf29ce4ull, 0x9ce484222325cbf2ull,
                           0x2325cbf29ce48422ull};
  std::size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    std::uint64_t w[4];
    std::memcpy(w, p + i, 32);
    std::memcpy(q + i, w, 32);
    for (int k = 0; k < 4; ++k) lane[k] = fnv_fold(lane[k], w[k]);
  }
  std::uint64_t h = lane[0];
  for (int k = 1; k < 4; ++k) h = fnv_fold(h, lane[k]);
  for (; i < bytes; i += 8) {
    std::uint64_t w = 0;
    const std::size_t n = std::min<std::size_t>(8, bytes - i);
    std::memcpy(&w, p + i, n);
    std::memcpy(q + i, &w, n);
    h = fnv_fold(h, w);
  }
  return h;
}

std::string snapshot_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.snap", rank);
  return name;
}

ImageLayout image_layout(const std::vector<std::int64_t>& piece_bytes) {
  ImageLayout l;
  for (const std::int64_t b : piece_bytes) {
    l.offsets.push_back(l.bytes);
    l.bytes += (b + 63) / 64 * 64;  // each piece on a cache line of its own
  }
  return l;
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path, std::int64_t bytes, bool touch) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw IoError(ErrorKind::kIo, fmt::format("cannot open memory snapshot image '{}': {}", path, std::strerror(errno)));
  // Sized first, then every page allocated (posix_fallocate): a tmpfs out of
  // room fails here, by name, not with SIGBUS at the first write.
  struct stat st {};
  int err = ::fstat(fd, &st) != 0 ? errno : 0;
  if (!err && st.st_size != bytes && ::ftruncate(fd, off_t(bytes)) != 0) err = errno;
  if (!err && bytes > 0) err = ::posix_fallocate(fd, 0, off_t(bytes));
  if (err) {
    ::close(fd);
    throw IoError(ErrorKind::kIo, fmt::format("cannot make memory snapshot image '{}' {} bytes long: {}{}", path,
                                              bytes, std::strerror(err),
                                              err == ENOSPC ? " (the memory tier's file system is full)" : ""));
  }
  void* data = nullptr;
  if (bytes > 0) {
    data = ::mmap(nullptr, std::size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (data == MAP_FAILED) {
      err = errno;
      ::close(fd);
      throw IoError(ErrorKind::kIo,
                    fmt::format("cannot map memory snapshot image '{}' ({} bytes): {}", path, bytes, std::strerror(err)));
    }
  }
  if (touch && data) std::memset(data, 0, std::size_t(bytes));
  return std::shared_ptr<MappedFile>(new MappedFile(path, fd, data, bytes));
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, std::size_t(bytes_));
  if (fd_ >= 0) ::close(fd_);
}

Tensor view_of(const std::shared_ptr<MappedFile>& file, std::int64_t offset, std::int64_t count, DType dtype) {
  HT_CHECK(offset >= 0 && offset + count * std::int64_t(dtype_size(dtype)) <= file->bytes(), ErrorKind::kInternal,
           "memory snapshot image '{}': a view of {} elements at byte {} runs past its {} bytes", file->path(), count,
           offset, file->bytes());
  return Tensor::from_host_memory(file->data() + offset, {count}, dtype, file);
}

}  // namespace ht::ckpt::detail
