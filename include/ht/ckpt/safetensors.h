// Safetensors, the weights format of the Hugging Face ecosystem, read and
// written: one file, or a sharded checkpoint of several files and an index.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [4096, 4096], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"<key>": "<string>", ...}}
// and then the data: each tensor's bytes, row-major and little-endian, at
// [begin, end) counted from the end of the header. A sharded checkpoint is
// files named "model-00001-of-00003.safetensors" ... and
// "model.safetensors.index.json":
//   {"metadata": {"total_size": <bytes of all tensors>},
//    "weight_map": {"<name>": "model-00001-of-00003.safetensors", ...}}
//
// Reading maps the file (mmap) and copies out only the bytes asked for: a
// rank that reads rows [a, b) of a matrix, or a flat element range, touches
// only those pages. Opening validates the whole header before anything is
// read, strictly: the header length within the file, JSON that parses, known
// dtypes, shapes whose byte count equals the tensor's offsets, offsets that
// tile the data section exactly (no gap, no overlap, nothing past the end,
// nothing after the last tensor: a truncated file is refused), no name twice.
// Every error is an IoError (kind kIo) whose message names the file and what
// is wrong in it.
//
// Writing goes to "<path>.tmp", is synced and renamed (core AtomicFile), so a
// crash never leaves a file under the final name that looks complete; the
// index of a sharded checkpoint is written last, after every shard.
//
// Thread-safety: a SafetensorsFile or SafetensorsCheckpoint is immutable
// after open(); its reads may run from several threads at once. Copies share
// the mapping, which lives as long as the last copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ht/core/tensor.h"

namespace ht::detail {
class FileMapping;
}

namespace ht::ckpt {

/// Bytes per element of a safetensors dtype name ("F32" 4, "BF16" 2, "I64"
/// 8, "BOOL" 1, ...), or 0 for a name the format does not define (or a
/// sub-byte type, which this reader does not support).
std::int64_t safetensors_dtype_bytes(std::string_view dtype);
/// The safetensors name of a tensor dtype: "F32", "F16", "BF16", "I32".
std::string_view safetensors_dtype(DType dtype);

/// One tensor of a file's header.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // the file's name for it: "F32", "BF16", "I64", ...
  Shape shape;        // [] for a 0-d tensor (one element)
  std::int64_t begin = 0, end = 0;  // bytes, from the end of the header

  std::int64_t numel() const { return shape_numel(shape); }
  std::int64_t bytes() const { return end - begin; }
  /// Whether ht::Tensor holds this dtype (F32, F16, BF16, I32): read() gives it.
  bool tensor_dtype() const;
};

/// A validated header.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in the order of their data
  std::map<std::string, std::string> metadata;
};

/// Parses the N bytes of JSON of a file whose data section holds `data_bytes`
/// bytes, with every check listed above. `path` names the file in errors.
/// Throws IoError. (SafetensorsFile::open calls it; it is public for tools
/// and the fuzzer.)
SafetensorsHeader parse_safetensors_header(std::string_view json, std::int64_t data_bytes, const std::string& path);

/// One safetensors file, mapped.
class SafetensorsFile {
 public:
  /// Maps and validates `path`. Throws IoError naming it.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const;
  /// The tensors in the order of their data.
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const { return by_name_.count(name) != 0; }
  /// Throws kInvalidArgument naming the file when there is no such tensor.
  const SafetensorsEntry& entry(const std::string& name) const;

  /// The whole tensor, copied into a new host tensor of its shape and dtype.
  /// Throws kNotSupported for a dtype ht::Tensor does not hold (read its
  /// bytes with bytes()).
  Tensor read(const std::string& name) const;
  /// Rows [begin, end) of dimension 0 (a tensor of at least one dimension),
  /// shape [end - begin, the other dimensions]: what one rank reads of a
  /// matrix split by rows. Throws kOutOfRange for rows outside the tensor.
  Tensor read_rows(const std::string& name, std::int64_t begin, std::int64_t end) const;
  /// Elements [first, first + count) of the flattened tensor, shape [count]:
  /// a flat shard (ZeRO). Throws kOutOfRange past the tensor.
  Tensor read_elements(const std::string& name, std::int64_t first, std::int64_t count) const;
  /// The mapped bytes of elements [first, first + count) of any dtype,
  /// borrowed: valid while this object (or a copy) lives. count -1: to the end.
  std::span<const std::byte> bytes(const std::string& name, std::int64_t first = 0, std::int64_t count = -1) const;

  /// Bytes from the start of the file to the data section (8 + N).
  std::int64_t data_offset() const { return data_offset_; }

 private:
  std::shared_ptr<const ::ht::detail::FileMapping> map_;
  SafetensorsHeader header_;
  std::map<std::string, std::size_t> by_name_;
  std::int64_t data_offset_ = 0;
};

/// What write_safetensors puts in a file beside the tensors.
struct SafetensorsWriteOptions {
  /// The "__metadata__" strings (e.g. {"format": "pt"}, which transformers' loader asks for).
  std::map<std::string, std::string> metadata{{"format", "pt"}};
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// A tensor to write, known by its name, dtype and shape before its values:
/// the header needs only those, so a writer calls `values` when it reaches
/// the tensor, and a model of any size is written holding one tensor at a
/// time. `values` must give a tensor of exactly that dtype and shape (any
/// device); anything else is an internal error and the file is not written.
struct TensorSource {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::function<Tensor()> values;
};
using TensorSources = std::vector<TensorSource>;

/// Sources that give the tensors of `tensors` as they are (they share them).
TensorSources sources_of(const NamedTensors& tensors);

/// Writes `tensors` (any device; copied to the host one at a time) to
/// `path`, in the given order, the header padded with spaces to a multiple
/// of 8 bytes so that every tensor of 8-byte-multiple size starts aligned.
/// Atomic (see above). Throws kInvalidArgument for an undefined tensor, an
/// empty name, "__metadata__" or a name given twice; IoError for the disk.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const SafetensorsWriteOptions& options = {});
/// The same from sources, each called once, in order.
void write_safetensors(const std::string& path, const TensorSources& tensors,
                       const SafetensorsWriteOptions& options = {});

/// A sharded checkpoint's index file.
struct SafetensorsIndex {
  std::int64_t total_size = 0;                    // bytes of all tensors' data
  std::map<std::string, std::string> weight_map;  // tensor -> file name, relative to the index's directory
  /// The files, each once, in name order.
  std::vector<std::string> files() const;
};

inline constexpr std::string_view kSafetensorsIndexName = "model.safetensors.index.json";

/// Reads and validates an index (a JSON object with "weight_map", an object
/// of file names without a directory part, and "metadata.total_size" if
/// present). Throws IoError naming the file.
SafetensorsIndex read_safetensors_index(const std::string& path);

/// Which shard each tensor of `bytes` goes to: tensors in order, a new shard
/// whenever the next one would take the current past `max_shard_bytes`; a
/// tensor larger than the limit alone in its shard. Pure; shard numbers from
/// 0, one entry per tensor.
std::vector<int> plan_safetensors_shards(const std::vector<std::int64_t>& bytes, std::int64_t max_shard_bytes);

struct SafetensorsShardOptions {
  std::int64_t max_shard_bytes = 5'000'000'000;  // transformers' default, "5GB"
  std::string prefix = "model";                   // "<prefix>-00001-of-00002.safetensors"
  SafetensorsWriteOptions file;
};

/// Writes `tensors` into `dir` (created if missing) as shards of at most
/// max_shard_bytes of data each (plan_safetensors_shards) and, after them,
/// "<dir>/model.safetensors.index.json"; one shard is named
/// "<prefix>.safetensors" and gets no index, as transformers does. Returns
/// the index (also for one shard). Each file is atomic; a crash before the
/// index is renamed leaves no index, so no loader takes the shards for a checkpoint.
SafetensorsIndex write_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                                           const SafetensorsShardOptions& options = {});
/// The same from sources, each called once, in order.
SafetensorsIndex write_safetensors_sharded(const std::string& dir, const TensorSources& tensors,
                                           const SafetensorsShardOptions& options = {});

/// A model's weights: one safetensors file, or a sharded checkpoint through
/// its index. Every tensor is found by name in the file that holds it.
class SafetensorsCheckpoint {
 public:
  /// `path`: a .safetensors file, an index file, or a directory holding an
  /// index (preferred) or exactly one .safetensors file. Opens and validates
  /// every file and checks that each tensor of the index is in the file the
  /// index names, and no tensor is in two files. Throws IoError naming the
  /// file and tensor.
  static SafetensorsCheckpoint open(const std::string& path);

  /// Every tensor, in name order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  /// The file that holds `name`. Throws kInvalidArgument naming the checkpoint.
  const SafetensorsFile& file_of(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const { return file_of(name).entry(name); }
  const std::vector<SafetensorsFile>& files() const { return files_; }

  Tensor read(const std::string& name) const { return file_of(name).read(name); }
  Tensor read_rows(const std::string& name, std::int64_t begin, std::int64_t end) const {
    return file_of(name).read_rows(name, begin, end);
  }
  Tensor read_elements(const std::string& name, std::int64_t first, std::int64_t count) const {
    return file_of(name).read_elements(name, first, count);
  }

 private:
  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t> where_;
};

}  // namespace ht::ckpt
