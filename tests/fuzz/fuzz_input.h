// Shared by the fuzz targets: readers that take a path get the fuzzer's bytes
// written to a file in one scratch directory per process (made on first use,
// removed at exit), reused from input to input.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ht::fuzz {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ht_fuzz_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a scratch directory");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline const std::filesystem::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

/// Writes `bytes` to `<scratch dir>/<name>` (replacing what was there) and returns its path.
inline std::string write_scratch_file(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write the scratch file " + path.string());
  return path.string();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Whether `bytes` start as an HDF5 file whose superblock is version 2 or
/// later: the formats in which HDF5 checksums every metadata block (what the
/// library writes, H5F_LIBVER_V18). Versions 0 and 1 have no checksums and
/// HDF5 1.10.8 itself crashes on damaged ones; the HDF5 targets pass them
/// over (tests/fuzz/CMakeLists.txt says why).
inline bool hdf5_checksummed(std::string_view bytes) {
  constexpr std::string_view kSignature("\x89HDF\r\n\x1a\n", 8);
  return bytes.size() > 8 && bytes.substr(0, 8) == kSignature && static_cast<unsigned char>(bytes[8]) >= 2;
}

}  // namespace ht::fuzz
