// Safetensors files and sharded checkpoints: the strict header parser, the
// mapped reader, the atomic writer and the index.
#include "ht/ckpt/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/file_mapping.h"
#include "core/files.h"
#include "core/json_integer.h"

namespace ht::ckpt {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

// Every dtype of the format of a whole number of bytes (F4 and other
// sub-byte types are not byte-addressable and are refused as unknown).
constexpr std::pair<std::string_view, std::int64_t> kDTypes[] = {
    {"BOOL", 1},    {"U8", 1},      {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},     {"U16", 2},     {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8},     {"C64", 8},
};

[[noreturn]] void malformed(const std::string& path, const std::string& what) {
  throw IoError(ErrorKind::kIo, fmt::format("safetensors file '{}': {}", path, what));
}

std::string known_dtypes() {
  std::string s;
  for (const auto& [name, bytes] : kDTypes) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

SafetensorsEntry parse_entry(const std::string& name, const Json& j, const std::string& path) {
  const std::string where = fmt::format("tensor '{}'", name);
  if (!j.is_object()) malformed(path, fmt::format("{} is {}, not an object with dtype, shape and data_offsets", where, j.dump()));
  for (const auto& [key, value] : j.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      malformed(path, fmt::format("{} has an unknown field '{}' (a tensor has dtype, shape and data_offsets)", where, key));
  if (!j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
    malformed(path, fmt::format("{} lacks {}", where,
                                !j.contains("dtype") ? "its dtype" : !j.contains("shape") ? "its shape" : "its data_offsets"));
  SafetensorsEntry e;
  e.name = name;
  if (!j["dtype"].is_string()) malformed(path, fmt::format("{}: dtype {} is not a string", where, j["dtype"].dump()));
  e.dtype = j["dtype"].get<std::string>();
  const std::int64_t element = safetensors_dtype_bytes(e.dtype);
  if (element == 0) malformed(path, fmt::format("{} has the unknown dtype '{}' (known: {})", where, e.dtype, known_dtypes()));
  const Json& shape = j["shape"];
  if (!shape.is_array()) malformed(path, fmt::format("{}: shape {} is not an array", where, shape.dump()));
  std::int64_t numel = 1;
  bool overflow = false;
  for (const Json& d : shape) {
    std::int64_t n = 0;
    try {
      n = ht::detail::json_integer<std::int64_t>(d, "a dimension");
    } catch (const std::invalid_argument& err) {
      malformed(path, fmt::format("{}: shape {}: {}", where, shape.dump(), err.what()));
    }
    if (n < 0) malformed(path, fmt::format("{}: shape {} has a negative dimension", where, shape.dump()));
    e.shape.push_back(n);
    overflow = overflow || __builtin_mul_overflow(numel, n, &numel);
  }
  std::int64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(numel, element, &bytes))
    malformed(path, fmt::format("{}: shape {} of {} holds more bytes than a file can", where, shape.dump(), e.dtype));
  const Json& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    malformed(path, fmt::format("{}: data_offsets {} is not [begin, end]", where, off.dump()));
  try {
    e.begin = ht::detail::json_integer<std::int64_t>(off[0], "begin");
    e.end = ht::detail::json_integer<std::int64_t>(off[1], "end");
  } catch (const std::invalid_argument& err) {
    malformed(path, fmt::format("{}: data_offsets {}: {}", where, off.dump(), err.what()));
  }
  if (e.begin < 0 || e.end < e.begin)
    malformed(path, fmt::format("{}: data_offsets [{}, {}] is not a range of bytes", where, e.begin, e.end));
  if (e.end - e.begin != bytes)
    malformed(path, fmt::format("{}: {} {} is {} bytes but its data_offsets [{}, {}] hold {}", where, e.dtype,
                                shape_str(e.shape), bytes, e.begin, e.end, e.end - e.begin));
  return e;
}

void check_tiling(std::vector<SafetensorsEntry>& entries, std::int64_t data_bytes, const std::string& path) {
  // Sorted by (begin, end), each tensor must start where the one before
  // ended: a gap is bytes no tensor owns, an overlap two tensors sharing
  // bytes; the last must end at the end of the file (a shorter file is
  // truncated, a longer one has trailing bytes no tensor owns).
  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::int64_t at = 0;
  const SafetensorsEntry* before = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.end > data_bytes)
      malformed(path, fmt::format("tensor '{}': data_offsets [{}, {}] run past the data section's {} bytes (the file "
                                  "is truncated or its header is wrong)",
                                  e.name, e.begin, e.end, data_bytes));
    if (e.begin < at)
      malformed(path, fmt::format("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", before->name, before->begin,
                                  before->end, e.name, e.begin, e.end));
    if (e.begin > at)
      malformed(path, fmt::format("bytes [{}, {}] of the data section belong to no tensor (a gap before '{}')", at,
                                  e.begin, e.name));
    at = e.end;
    if (e.bytes() > 0) before = &e;
  }
  if (at != data_bytes)
    malformed(path, fmt::format("the tensors end at byte {} of the data section but it holds {} bytes (trailing bytes "
                                "no tensor owns)",
                                at, data_bytes));
}

void check_name(const std::string& name, std::set<std::string>& seen, const std::string& what) {
  HT_CHECK_ARG(!name.empty() && name != kMetadataKey, "{}: '{}' cannot name a tensor", what, name);
  HT_CHECK_ARG(seen.insert(name).second, "{}: the tensor '{}' is given twice", what, name);
}

Tensor host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

void write_le64(unsigned char* out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::string index_path_in(const std::string& dir) { return (fs::path(dir) / std::string(kSafetensorsIndexName)).string(); }

}  // namespace

std::int64_t safetensors_dtype_bytes(std::string_view dtype) {
  for (const auto& [name, bytes] : kDTypes)
    if (name == dtype) return bytes;
  return 0;
}

std::string_view safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
  }
  return "?";
}

namespace {
bool tensor_dtype_of(std::string_view name, DType& out) {
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32})
    if (safetensors_dtype(t) == name) {
      out = t;
      return true;
    }
  return false;
}
}  // namespace

bool SafetensorsEntry::tensor_dtype() const {
  DType t;
  return tensor_dtype_of(dtype, t);
}

SafetensorsHeader parse_safetensors_header(std::string_view json, std::int64_t data_bytes, const std::string& path) {
  // nlohmann keeps the last of two equal keys; a name given twice is refused instead.
  std::string duplicate;
  std::set<std::string> keys;
  const Json::parser_callback_t note_keys = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && !keys.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json j;
  try {
    j = Json::parse(json.begin(), json.end(), note_keys);
  } catch (const Json::exception& e) {
    malformed(path, fmt::format("its {}-byte header is not JSON: {}", json.size(), e.what()));
  }
  if (!j.is_object()) malformed(path, fmt::format("its header is {}, not a JSON object", j.type_name()));
  if (!duplicate.empty()) malformed(path, fmt::format("the header names '{}' twice", duplicate));
  SafetensorsHeader h;
  for (const auto& [name, value] : j.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) malformed(path, fmt::format("__metadata__ is {}, not an object of strings", value.dump()));
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string())
          malformed(path, fmt::format("__metadata__ '{}' is {}, not a string", key, text.dump()));
        h.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(name, value, path));
  }
  check_tiling(h.entries, data_bytes, path);
  return h;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.map_ = ht::detail::FileMapping::open(path, "safetensors file");
  const std::int64_t size = f.map_->bytes();
  if (size < 8)
    malformed(path, fmt::format("it is {} bytes, too short for the 8-byte header length (not a safetensors file, "
                                "or truncated)",
                                size));
  std::uint64_t n = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(f.map_->data());
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(p[i]) << (8 * i);
  if (n > std::uint64_t(size - 8))
    malformed(path, fmt::format("the header length {} runs past the file's end ({} bytes after the length): the file "
                                "is truncated or not safetensors",
                                n, size - 8));
  f.data_offset_ = 8 + std::int64_t(n);
  f.header_ = parse_safetensors_header(
      std::string_view(reinterpret_cast<const char*>(p + 8), std::size_t(n)), size - f.data_offset_, path);
  for (std::size_t i = 0; i < f.header_.entries.size(); ++i) f.by_name_[f.header_.entries[i].name] = i;
  return f;
}

const std::string& SafetensorsFile::path() const { return map_->path(); }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = by_name_.find(name);
  HT_CHECK_ARG(it != by_name_.end(), "safetensors file '{}' has no tensor '{}' ({} tensors)", path(), name,
               header_.entries.size());
  return header_.entries[it->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const std::string& name, std::int64_t first,
                                                  std::int64_t count) const {
  const SafetensorsEntry& e = entry(name);
  const std::int64_t numel = e.numel();
  if (count < 0) count = numel - first;
  HT_CHECK(first >= 0 && count >= 0 && first <= numel && count <= numel - first, ErrorKind::kOutOfRange,
           "safetensors file '{}': elements [{}, {}) are outside tensor '{}' of {} elements", path(), first,
           first + count, name, numel);
  const std::int64_t element = safetensors_dtype_bytes(e.dtype);
  return {map_->data() + data_offset_ + e.begin + first * element, std::size_t(count * element)};
}

Tensor SafetensorsFile::read_elements(const std::string& name, std::int64_t first, std::int64_t count) const {
  const SafetensorsEntry& e = entry(name);
  DType dtype;
  HT_CHECK(tensor_dtype_of(e.dtype, dtype), ErrorKind::kNotSupported,
           "safetensors file '{}': tensor '{}' is {}, which ht::Tensor does not hold (F32, F16, BF16, I32): read its "
           "bytes with SafetensorsFile::bytes",
           path(), name, e.dtype);
  const std::span<const std::byte> src = bytes(name, first, count);
  Tensor out = Tensor::empty({count}, dtype, Device::cpu(), MemCategory::kOther);
  if (!src.empty()) std::memcpy(out.data_ptr(), src.data(), src.size());
  return out;
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  return read_elements(name, 0, e.numel()).view(e.shape);
}

Tensor SafetensorsFile::read_rows(const std::string& name, std::int64_t begin, std::int64_t end) const {
  const SafetensorsEntry& e = entry(name);
  HT_CHECK_ARG(!e.shape.empty(), "safetensors file '{}': tensor '{}' is 0-d and has no rows; read it whole", path(),
               name);
  HT_CHECK(0 <= begin && begin <= end && end <= e.shape[0], ErrorKind::kOutOfRange,
           "safetensors file '{}': rows [{}, {}) are outside tensor '{}' of shape {}", path(), begin, end, name,
           shape_str(e.shape));
  const std::int64_t row = e.shape[0] == 0 ? 0 : e.numel() / e.shape[0];
  Shape shape = e.shape;
  shape[0] = end - begin;
  return read_elements(name, begin * row, (end - begin) * row).view(shape);
}

TensorSources sources_of(const NamedTensors& tensors) {
  TensorSources sources;
  for (const auto& [name, t] : tensors) {
    HT_CHECK_ARG(t.defined(), "tensor '{}' is undefined: there is nothing to write", name);
    sources.push_back({name, t.dtype(), t.shape(), [t] { return t; }});
  }
  return sources;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors, const SafetensorsWriteOptions& options) {
  write_safetensors(path, sources_of(tensors), options);
}

void write_safetensors(const std::string& path, const TensorSources& tensors, const SafetensorsWriteOptions& options) {
  // The header first (every offset is known from the shapes), then each
  // tensor's bytes in order, asked for and copied to the host one at a time.
  Json header = Json::object();
  if (!options.metadata.empty()) header[std::string(kMetadataKey)] = options.metadata;
  std::set<std::string> seen;
  std::int64_t at = 0;
  for (const TensorSource& t : tensors) {
    check_name(t.name, seen, fmt::format("write_safetensors '{}'", path));
    const std::int64_t bytes = shape_numel(t.shape) * std::int64_t(dtype_size(t.dtype));
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  write_le64(length, text.size());
  ht::detail::AtomicFile out(path, "safetensors file");
  out.write(length, 8);
  out.write(text);
  for (const TensorSource& source : tensors) {
    const Tensor t = source.values();
    HT_CHECK(t.defined() && t.dtype() == source.dtype && t.shape() == source.shape, ErrorKind::kInternal,
             "write_safetensors '{}': tensor '{}' was announced as {} [{}] but its values are {} [{}]", path,
             source.name, dtype_name(source.dtype), fmt::join(source.shape, ", "),
             t.defined() ? dtype_name(t.dtype()) : "undefined", fmt::join(t.defined() ? t.shape() : Shape{}, ", "));
    if (t.nbytes() > 0) out.write(host(t).data_ptr(), t.nbytes());
  }
  out.commit();
}

std::vector<std::string> SafetensorsIndex::files() const {
  std::set<std::string> s;
  for (const auto& [name, file] : weight_map) s.insert(file);
  return {s.begin(), s.end()};
}

SafetensorsIndex read_safetensors_index(const std::string& path) {
  const auto map = ht::detail::FileMapping::open(path, "safetensors index");
  const auto fail = [&](const std::string& what) -> void {
    throw IoError(ErrorKind::kIo, fmt::format("safetensors index '{}': {}", path, what));
  };
  Json j;
  try {
    const auto* p = reinterpret_cast<const char*>(map->data());
    j = Json::parse(p, p + map->bytes());
  } catch (const Json::exception& e) {
    fail(fmt::format("not JSON: {}", e.what()));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("it has no \"weight_map\" object of tensor names to files");
  SafetensorsIndex index;
  if (j.contains("metadata")) {
    if (!j["metadata"].is_object()) fail(fmt::format("its metadata is {}, not an object", j["metadata"].dump()));
    if (j["metadata"].contains("total_size")) {
      try {
        index.total_size = ht::detail::json_integer<std::int64_t>(j["metadata"]["total_size"], "metadata.total_size");
      } catch (const std::invalid_argument& e) {
        fail(e.what());
      }
    }
  }
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail(fmt::format("tensor '{}' maps to {}, not a file name", name, file.dump()));
    const std::string f = file.get<std::string>();
    // File names only: an index must not reach outside its directory.
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      fail(fmt::format("tensor '{}' maps to '{}', not a file name in the index's directory", name, f));
    index.weight_map[name] = f;
  }
  return index;
}

std::vector<int> plan_safetensors_shards(const std::vector<std::int64_t>& bytes, std::int64_t max_shard_bytes) {
  HT_CHECK_ARG(max_shard_bytes > 0, "max_shard_bytes={} must be positive", max_shard_bytes);
  std::vector<int> shard;
  int current = 0;
  std::int64_t filled = 0;
  bool empty = true;
  for (const std::int64_t b : bytes) {
    if (!empty && b > 0 && filled + b > max_shard_bytes) {
      ++current;
      filled = 0;
      empty = true;
    }
    shard.push_back(current);
    filled += b;
    empty = false;
  }
  return shard;
}

SafetensorsIndex write_safetensors_sharded(const std::string& dir, const NamedTensors& tensors,
                                           const SafetensorsShardOptions& options) {
  return write_safetensors_sharded(dir, sources_of(tensors), options);
}

SafetensorsIndex write_safetensors_sharded(const std::string& dir, const TensorSources& tensors,
                                           const SafetensorsShardOptions& options) {
  HT_CHECK_ARG(!options.prefix.empty() && options.prefix.find('/') == std::string::npos,
               "write_safetensors_sharded: prefix '{}' must be a file name", options.prefix);
  const std::error_code ec = ht::detail::make_directories(dir);
  if (ec) throw IoError(ErrorKind::kIo, fmt::format("cannot create checkpoint directory '{}': {}", dir, ec.message()));
  std::vector<std::int64_t> bytes;
  for (const TensorSource& t : tensors) bytes.push_back(shape_numel(t.shape) * std::int64_t(dtype_size(t.dtype)));
  const std::vector<int> shard = plan_safetensors_shards(bytes, options.max_shard_bytes);
  const int shards = shard.empty() ? 1 : shard.back() + 1;
  SafetensorsIndex index;
  for (int s = 0; s < shards; ++s) {
    const std::string file = shards == 1 ? options.prefix + ".safetensors"
                                         : fmt::format("{}-{:05d}-of-{:05d}.safetensors", options.prefix, s + 1, shards);
    TensorSources part;
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (shard[i] == s) {
        part.push_back(tensors[i]);
        index.weight_map[tensors[i].name] = file;
        index.total_size += bytes[i];
      }
    write_safetensors((fs::path(dir) / file).string(), part, options.file);
  }
  if (shards > 1) {
    Json j = {{"metadata", {{"total_size", index.total_size}}}, {"weight_map", index.weight_map}};
    ht::detail::AtomicFile out(index_path_in(dir), "safetensors index");
    out.write(j.dump(2) + "\n");
    out.commit();
  }
  return index;
}

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  SafetensorsCheckpoint c;
  c.path_ = path;
  std::string index_path;
  if (fs::is_directory(path)) {
    if (fs::is_regular_file(index_path_in(path))) {
      index_path = index_path_in(path);
    } else {
      std::vector<std::string> found;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(path, ec))
        if (e.is_regular_file() && e.path().extension() == ".safetensors") found.push_back(e.path().string());
      HT_CHECK(found.size() == 1, ErrorKind::kIo,
               "'{}' holds {} .safetensors files and no {}: give the index or one file", path, found.size(),
               kSafetensorsIndexName);
      c.files_.push_back(SafetensorsFile::open(found[0]));
    }
  } else if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    index_path = path;
  } else {
    c.files_.push_back(SafetensorsFile::open(path));
  }
  if (!index_path.empty()) {
    const SafetensorsIndex index = read_safetensors_index(index_path);
    const fs::path dir = fs::path(index_path).parent_path();
    std::map<std::string, std::size_t> file_number;
    for (const std::string& f : index.files()) {
      file_number[f] = c.files_.size();
      c.files_.push_back(SafetensorsFile::open((dir / f).string()));
    }
    for (const auto& [name, f] : index.weight_map)
      if (!c.files_[file_number[f]].contains(name))
        throw IoError(ErrorKind::kIo, fmt::format("safetensors index '{}' puts tensor '{}' in '{}', which has no such "
                                                  "tensor (a shard from another checkpoint, or a stale index)",
                                                  index_path, name, c.files_[file_number[f]].path()));
  }
  for (std::size_t i = 0; i < c.files_.size(); ++i)
    for (const SafetensorsEntry& e : c.files_[i].entries()) {
      const auto [it, inserted] = c.where_.emplace(e.name, i);
      if (!inserted)
        throw IoError(ErrorKind::kIo, fmt::format("safetensors checkpoint '{}': tensor '{}' is in both '{}' and '{}'",
                                                  path, e.name, c.files_[it->second].path(), c.files_[i].path()));
    }
  return c;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

const SafetensorsFile& SafetensorsCheckpoint::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  HT_CHECK_ARG(it != where_.end(), "safetensors checkpoint '{}' has no tensor '{}'", path_, name);
  return files_[it->second];
}

}  // namespace ht::ckpt
