// Safetensors: round trips of every tensor dtype (0-d and empty tensors
// too), row and element ranges equal to slices of the whole, sharded
// checkpoints through their index, the shard plan, and every malformed file
// refused with a message naming the file and what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ht/ckpt/safetensors.h"
#include "test_util.h"

namespace ht::ckpt {
namespace {
namespace fs = std::filesystem;

std::vector<std::byte> bytes_of(const Tensor& t) {
  std::vector<std::byte> b(t.nbytes());
  if (!b.empty()) std::memcpy(b.data(), t.data_ptr(), b.size());
  return b;
}

// Small integers and halves: exact in every dtype.
Tensor exact_tensor(const Shape& shape, DType dtype, int salt) {
  const std::int64_t n = shape_numel(shape);
  if (dtype == DType::kI32) {
    std::vector<std::int32_t> v;
    for (std::int64_t i = 0; i < n; ++i) v.push_back(std::int32_t((i * 7 + salt) % 23) - 11 + (i % 3 == 0 ? 100000 : 0));
    return Tensor::from_vector(v, shape);
  }
  std::vector<float> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(float((i * 7 + salt) % 23 - 11) * 0.5f);
  Tensor f = Tensor::from_vector(v, shape);
  if (dtype == DType::kF32) return f;
  if (dtype == DType::kF16) {
    std::vector<f16> h;
    for (float x : v) h.push_back(to_f16(x));
    return Tensor::from_vector(h, shape);
  }
  std::vector<bf16> h;
  for (float x : v) h.push_back(to_bf16(x));
  return Tensor::from_vector(h, shape);
}

void expect_same(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(bytes_of(got), bytes_of(want));
}

// A file written byte by byte: 8-byte length, `header`, then `data`.
void write_raw(const std::string& path, const std::string& header, std::size_t data_bytes, std::uint64_t length = 0) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::uint64_t n = length ? length : header.size();
  for (int i = 0; i < 8; ++i) out.put(char(n >> (8 * i)));
  out << header << std::string(data_bytes, '\0');
}

TEST(Safetensors, RoundTripsEveryDtypeEmptyAnd0d) {
  const test::TempDir dir("ht_safetensors_roundtrip");
  NamedTensors tensors = {
      {"w.f32", exact_tensor({3, 5}, DType::kF32, 1)},   {"w.f16", exact_tensor({4, 2, 3}, DType::kF16, 2)},
      {"w.bf16", exact_tensor({7}, DType::kBF16, 3)},    {"ids.i32", exact_tensor({2, 6}, DType::kI32, 4)},
      {"scalar", exact_tensor({}, DType::kF32, 5)},      {"empty", exact_tensor({0, 4}, DType::kBF16, 6)},
      {"empty.1d", exact_tensor({0}, DType::kI32, 7)},  {"scalar.i32", exact_tensor({}, DType::kI32, 8)},
  };
  write_safetensors(dir / "m.safetensors", tensors, {.metadata = {{"format", "pt"}, {"step", "12"}}});
  EXPECT_FALSE(fs::exists(dir / "m.safetensors.tmp"));
  const SafetensorsFile f = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_EQ(f.entries().size(), tensors.size());
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}}));
  EXPECT_EQ(f.data_offset() % 8, 0);
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    expect_same(f.read(name), t);
    EXPECT_EQ(f.entry(name).dtype, safetensors_dtype(t.dtype()));
    EXPECT_EQ(f.entry(name).bytes(), std::int64_t(t.nbytes()));
  }
  EXPECT_EQ(f.read("scalar").ndim(), 0);
  EXPECT_EQ(f.read("scalar").item(), exact_tensor({}, DType::kF32, 5).item());
  // Entries in the order of their data, tiling it.
  std::int64_t at = 0;
  for (const SafetensorsEntry& e : f.entries()) {
    EXPECT_EQ(e.begin, at);
    at = e.end;
  }
}

TEST(Safetensors, RowAndElementRangesEqualSlicesOfTheWhole) {
  const test::TempDir dir("ht_safetensors_ranges");
  const Tensor w = exact_tensor({7, 5}, DType::kBF16, 9), v = exact_tensor({3, 4, 2}, DType::kI32, 1);
  write_safetensors(dir / "m.safetensors", {{"w", w}, {"v", v}});
  const SafetensorsFile f = SafetensorsFile::open(dir / "m.safetensors");
  for (std::int64_t a = 0; a <= 7; ++a)
    for (std::int64_t b = a; b <= 7; ++b) expect_same(f.read_rows("w", a, b), w.slice(a, b));
  for (std::int64_t a = 0; a <= 3; ++a) expect_same(f.read_rows("v", a, 3), v.slice(a, 3));
  const Tensor flat = w.view({35});
  for (std::int64_t first = 0; first <= 35; first += 4)
    for (std::int64_t count = 0; first + count <= 35; count += 3) {
      expect_same(f.read_elements("w", first, count), flat.slice(first, first + count));
      EXPECT_EQ(f.bytes("w", first, count).size(), std::size_t(count * 2));
    }
  EXPECT_TRUE(test::throws_error([&] { f.read_rows("w", 3, 8); }, ErrorKind::kOutOfRange, {"rows [3, 8)", "'w'"}));
  EXPECT_TRUE(test::throws_error([&] { f.read_elements("w", 30, 6); }, ErrorKind::kOutOfRange, {"[30, 36)"}));
  EXPECT_TRUE(test::throws_error([&] { f.read("nope"); }, ErrorKind::kInvalidArgument, {"no tensor 'nope'"}));
}

TEST(Safetensors, OtherDtypesAreReadAsBytes) {
  const test::TempDir dir("ht_safetensors_i64");
  const std::string h = R"({"pos":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})";
  write_raw(dir / "a.safetensors", h, 16);
  const SafetensorsFile f = SafetensorsFile::open(dir / "a.safetensors");
  EXPECT_FALSE(f.entry("pos").tensor_dtype());
  EXPECT_EQ(f.bytes("pos").size(), 16u);
  EXPECT_TRUE(test::throws_error([&] { f.read("pos"); }, ErrorKind::kNotSupported, {"I64", "bytes"}));
}

TEST(Safetensors, ShardPlanFillsShardsInOrder) {
  EXPECT_EQ(plan_safetensors_shards({}, 10), std::vector<int>{});
  EXPECT_EQ(plan_safetensors_shards({4, 4, 4, 4}, 8), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(plan_safetensors_shards({4, 5, 4}, 8), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan_safetensors_shards({4, 3, 1, 5}, 8), (std::vector<int>{0, 0, 0, 1}));
  EXPECT_EQ(plan_safetensors_shards({20, 1, 20, 0}, 8), (std::vector<int>{0, 1, 2, 2}));  // a big tensor alone
  EXPECT_EQ(plan_safetensors_shards({0, 0, 8}, 8), (std::vector<int>{0, 0, 0}));
  // Exhaustively: no shard past the limit unless it holds one tensor (and
  // empty ones, which fit anywhere), shards consecutive.
  for (std::int64_t limit = 1; limit <= 12; ++limit)
    for (int mask = 0; mask < 4096; mask += 7) {
      std::vector<std::int64_t> sizes;
      for (int k = 0; k < 6; ++k) sizes.push_back((mask >> (2 * k)) & 3 ? ((mask >> (2 * k)) & 3) * 3 : 0);
      const std::vector<int> plan = plan_safetensors_shards(sizes, limit);
      std::map<int, std::pair<std::int64_t, int>> fill;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        if (i > 0) EXPECT_TRUE(plan[i] == plan[i - 1] || plan[i] == plan[i - 1] + 1);
        fill[plan[i]].first += sizes[i];
        fill[plan[i]].second += sizes[i] > 0;
      }
      for (const auto& [s, f] : fill) EXPECT_TRUE(f.first <= limit || f.second == 1);
    }
}

TEST(Safetensors, ShardedWriteReadsBackThroughItsIndex) {
  const test::TempDir dir("ht_safetensors_sharded");
  NamedTensors tensors;
  for (int i = 0; i < 5; ++i)
    tensors.emplace_back("layer." + std::to_string(i) + ".w", exact_tensor({4, 4}, DType::kF32, i));  // 64 bytes each
  tensors.emplace_back("tiny", exact_tensor({}, DType::kI32, 3));
  const SafetensorsIndex index =
      write_safetensors_sharded(dir / "ckpt", tensors, {.max_shard_bytes = 130, .prefix = "model", .file = {}});
  EXPECT_EQ(index.files(), (std::vector<std::string>{"model-00001-of-00003.safetensors",
                                                     "model-00002-of-00003.safetensors",
                                                     "model-00003-of-00003.safetensors"}));
  EXPECT_EQ(index.total_size, 5 * 64 + 4);
  EXPECT_EQ(index.weight_map.at("layer.4.w"), "model-00003-of-00003.safetensors");
  const SafetensorsIndex back = read_safetensors_index(dir / "ckpt/model.safetensors.index.json");
  EXPECT_EQ(back.weight_map, index.weight_map);
  EXPECT_EQ(back.total_size, index.total_size);
  for (const std::string& path : {dir / "ckpt", dir / "ckpt/model.safetensors.index.json"}) {
    const SafetensorsCheckpoint c = SafetensorsCheckpoint::open(path);
    EXPECT_EQ(c.files().size(), 3u);
    EXPECT_EQ(c.names().size(), tensors.size());
    for (const auto& [name, t] : tensors) expect_same(c.read(name), t);
    expect_same(c.read_rows("layer.2.w", 1, 3), tensors[2].second.slice(1, 3));
    EXPECT_EQ(fs::path(c.file_of("layer.0.w").path()).filename(), "model-00001-of-00003.safetensors");
  }
  // One shard: "model.safetensors", no index; the directory opens through the file.
  write_safetensors_sharded(dir / "one", tensors, {});
  EXPECT_TRUE(fs::exists(dir / "one/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "one/model.safetensors.index.json"));
  EXPECT_EQ(SafetensorsCheckpoint::open(dir / "one").names().size(), tensors.size());
}

TEST(Safetensors, WriterRefusesBadNames) {
  const test::TempDir dir("ht_safetensors_names");
  const Tensor t = exact_tensor({2}, DType::kF32, 0);
  EXPECT_TRUE(test::throws_error([&] { write_safetensors(dir / "a", {{"x", t}, {"x", t}}); },
                                 ErrorKind::kInvalidArgument, {"'x' is given twice"}));
  EXPECT_TRUE(test::throws_error([&] { write_safetensors(dir / "a", {{"__metadata__", t}}); },
                                 ErrorKind::kInvalidArgument, {"cannot name a tensor"}));
  EXPECT_TRUE(test::throws_error([&] { write_safetensors(dir / "a", {{"u", Tensor()}}); }, ErrorKind::kInvalidArgument,
                                 {"'u' is undefined"}));
  EXPECT_FALSE(fs::exists(dir / "a"));
  EXPECT_FALSE(fs::exists(dir / "a.tmp"));
}

// A source whose values are not what it announced (the header is already
// written from the announcement) fails the write and leaves no file.
TEST(Safetensors, SourceOfOtherShapeOrDtypeIsRefused) {
  const test::TempDir dir("ht_safetensors_sources");
  const Tensor t = exact_tensor({2, 3}, DType::kF32, 0);
  const auto write = [&](Shape shape, DType dtype) {
    return test::throws_error(
        [&] { write_safetensors(dir / "s", TensorSources{{"w", dtype, shape, [&] { return t; }}}); },
        ErrorKind::kInternal, {"'w' was announced as", "[2, 3]"});
  };
  EXPECT_TRUE(write({3, 2}, DType::kF32));
  EXPECT_TRUE(write({2, 3}, DType::kBF16));
  EXPECT_FALSE(fs::exists(dir / "s"));
  EXPECT_FALSE(fs::exists(dir / "s.tmp"));
  write_safetensors(dir / "s", TensorSources{{"w", DType::kF32, {2, 3}, [&] { return t; }}});
  EXPECT_EQ(SafetensorsFile::open(dir / "s").entry("w").shape, (Shape{2, 3}));
}

// Each malformed file is refused at open, naming the file and the fault.
TEST(Safetensors, MalformedFilesAreRefusedByName) {
  const test::TempDir dir("ht_safetensors_bad");
  const std::string p = dir / "bad.safetensors";
  const auto refused = [&](std::initializer_list<std::string_view> needles) {
    return test::throws_error([&] { SafetensorsFile::open(p); }, ErrorKind::kIo, needles);
  };
  const std::string t = R"("t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";

  std::ofstream(p, std::ios::binary) << "abc";
  EXPECT_TRUE(refused({"bad.safetensors", "3 bytes, too short"}));
  write_raw(p, "{" + t + "}", 16, 1000);
  EXPECT_TRUE(refused({"bad.safetensors", "header length 1000 runs past the file's end"}));
  write_raw(p, "{" + t + ",", 16);
  EXPECT_TRUE(refused({"bad.safetensors", "is not JSON"}));
  write_raw(p, "[1,2]", 0);
  EXPECT_TRUE(refused({"not a JSON object"}));
  write_raw(p, "{" + t + "}", 12);  // a truncated file: the offsets run past its end
  EXPECT_TRUE(refused({"bad.safetensors", "tensor 't'", "run past the data section's 12 bytes"}));
  write_raw(p, "{" + t + "}", 20);
  EXPECT_TRUE(refused({"trailing bytes", "end at byte 16", "holds 20 bytes"}));
  write_raw(p, R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12);
  EXPECT_TRUE(refused({"tensor 't'", "F32 [2, 2] is 16 bytes but its data_offsets [0, 12] hold 12"}));
  write_raw(p, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12);
  EXPECT_TRUE(refused({"'t' [0, 8] and 'u' [4, 12] overlap"}));
  write_raw(p, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
            20);
  EXPECT_TRUE(refused({"bytes [8, 12]", "belong to no tensor"}));
  write_raw(p, R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_TRUE(refused({"unknown dtype 'F33'"}));
  write_raw(p, R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);
  EXPECT_TRUE(refused({"negative dimension"}));
  write_raw(p, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8);
  EXPECT_TRUE(refused({"[8, 0] is not a range"}));
  write_raw(p, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
            16);
  EXPECT_TRUE(refused({"names 't' twice"}));
  write_raw(p, R"({"t":{"dtype":"F32","shape":[2]}})", 8);
  EXPECT_TRUE(refused({"lacks its data_offsets"}));
  write_raw(p, R"({"__metadata__":{"a":1}})", 0);
  EXPECT_TRUE(refused({"__metadata__ 'a' is 1, not a string"}));
  write_raw(p, R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8);
  EXPECT_TRUE(refused({"more bytes than a file can"}));
  EXPECT_TRUE(test::throws_error([&] { SafetensorsFile::open(dir / "missing.safetensors"); }, ErrorKind::kIo,
                                 {"cannot open", "missing.safetensors"}));
}

TEST(Safetensors, IndexFaultsAreRefusedByName) {
  const test::TempDir dir("ht_safetensors_badindex");
  const Tensor t = exact_tensor({2}, DType::kF32, 0);
  write_safetensors(dir / "a.safetensors", {{"x", t}});
  write_safetensors(dir / "b.safetensors", {{"y", t}, {"x", t}});
  const std::string index = dir / "model.safetensors.index.json";
  std::ofstream(index) << R"({"metadata":{"total_size":8},"weight_map":{"x":"a.safetensors","z":"a.safetensors"}})";
  EXPECT_TRUE(test::throws_error([&] { SafetensorsCheckpoint::open(index); }, ErrorKind::kIo,
                                 {"model.safetensors.index.json", "tensor 'z'", "a.safetensors", "no such tensor"}));
  std::ofstream(index) << R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})";
  EXPECT_TRUE(test::throws_error([&] { SafetensorsCheckpoint::open(index); }, ErrorKind::kIo,
                                 {"tensor 'x' is in both"}));
  std::ofstream(index) << R"({"weight_map":{"x":"../a.safetensors"}})";
  EXPECT_TRUE(test::throws_error([&] { read_safetensors_index(index); }, ErrorKind::kIo, {"not a file name"}));
  std::ofstream(index) << R"({"weight_map":)";
  EXPECT_TRUE(test::throws_error([&] { read_safetensors_index(index); }, ErrorKind::kIo, {"index", "not JSON"}));
  std::ofstream(index) << R"({"weight_map":{"x":"gone.safetensors"}})";
  EXPECT_TRUE(test::throws_error([&] { SafetensorsCheckpoint::open(index); }, ErrorKind::kIo,
                                 {"cannot open", "gone.safetensors"}));
}

}  // namespace
}  // namespace ht::ckpt
