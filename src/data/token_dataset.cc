// Token files in HDF5, and byte-level tokenisation of text files.
#include "ht/data/token_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/files.h"
#include "core/h5_check.h"
#include "ht/data/text_corpus.h"
#include "ht/data/tokenizer.h"

namespace ht::data {
namespace fs = std::filesystem;
using detail::H5Attribute;
using detail::H5Dataset;
using detail::H5Dataspace;
using detail::H5File;
using detail::H5Plist;

namespace {

constexpr const char* kVocabAttr = "vocab_size";

void write_split(hid_t file, const char* name, const std::vector<std::int32_t>& ids, const std::string& path) {
  std::vector<std::uint16_t> data(ids.begin(), ids.end());
  const hsize_t dims[1] = {hsize_t(data.size())};
  H5Dataspace space(HT_H5_CHECK(H5Screate_simple(1, dims, nullptr), path));
  H5Dataset ds(HT_H5_CHECK(H5Dcreate2(file, name, H5T_STD_U16LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path));
  if (!data.empty())
    HT_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), path);
}

std::vector<std::int32_t> read_split(hid_t file, const char* name, const std::string& path) {
  HT_CHECK(H5Lexists(file, name, H5P_DEFAULT) > 0, ErrorKind::kIo,
           "token file '{}' has no '{}' dataset; create it with gpt_train --prepare-only or write_token_file", path, name);
  H5Dataset ds(HT_H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT), path));
  H5Dataspace space(HT_H5_CHECK(H5Dget_space(ds.get()), path));
  HT_CHECK(H5Sget_simple_extent_ndims(space.get()) == 1, ErrorKind::kIo, "token file '{}': '{}' must be 1-d", path, name);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  // Stored uncompressed by write_token_file: a header claiming more tokens
  // than the file's bytes hold is damaged, and is refused before its claim
  // is allocated.
  std::error_code ec;
  const std::uintmax_t file_bytes = fs::file_size(path, ec);
  HT_CHECK(!ec && n <= file_bytes / sizeof(std::uint16_t), ErrorKind::kIo,
           "token file '{}': '{}' claims {} tokens, more than the file's {} bytes hold: the file is corrupt", path,
           name, n, file_bytes);
  std::vector<std::uint16_t> data(n);
  if (n) HT_H5_CHECK(H5Dread(ds.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), path);
  return {data.begin(), data.end()};
}

void check_ids(const std::vector<std::int32_t>& ids, std::int64_t vocab, const char* split, const std::string& path) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    HT_CHECK(ids[i] >= 0 && ids[i] < vocab, ErrorKind::kInvalidArgument,
             "token file '{}': {} token {} at index {} is outside the vocabulary [0, {})", path, split, ids[i], i, vocab);
}

}  // namespace

void write_token_file(const std::string& path, const TokenSplits& splits) {
  HT_CHECK(splits.vocab_size > 0 && splits.vocab_size <= 65536, ErrorKind::kInvalidArgument,
           "write_token_file: vocab_size {} must lie in [1, 65536] (ids are stored as uint16)", splits.vocab_size);
  check_ids(splits.train, splits.vocab_size, "train", path);
  check_ids(splits.val, splits.vocab_size, "val", path);
  const std::string tmp = path + ".tmp";
  ht::detail::create_empty_file(tmp);  // HDF5 would create it 0666 under the umask
  {
    // HDF5 1.8's file format: checksummed metadata (see write_rank_file).
    H5Plist fapl(HT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), tmp));
    HT_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), tmp);
    H5File file(HT_H5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), tmp));
    write_split(file.get(), "train", splits.train, tmp);
    write_split(file.get(), "val", splits.val, tmp);
    H5Dataspace scalar(HT_H5_CHECK(H5Screate(H5S_SCALAR), tmp));
    H5Attribute attr(HT_H5_CHECK(H5Acreate2(file.get(), kVocabAttr, H5T_STD_I64LE, scalar.get(), H5P_DEFAULT, H5P_DEFAULT), tmp));
    const std::int64_t vocab = splits.vocab_size;
    HT_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_INT64, &vocab), tmp);
    HT_H5_CHECK(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  HT_CHECK(!ec, ErrorKind::kIo, "cannot rename '{}' to '{}': {}", tmp, path, ec.message());
}

TokenSplits read_token_file(const std::string& path) {
  HT_CHECK(fs::is_regular_file(path), ErrorKind::kIo,
           "token file '{}' does not exist; prepare one with `gpt_train --prepare-only --data {}` or pass --text FILES",
           path, path);
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  HT_CHECK(is_h5 > 0, ErrorKind::kIo, "'{}' is not an HDF5 token file (corrupt or of another format)", path);
  H5File file(HT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path));
  TokenSplits s;
  HT_CHECK(H5Aexists(file.get(), kVocabAttr) > 0, ErrorKind::kIo, "token file '{}' lacks the '{}' attribute", path,
           kVocabAttr);
  H5Attribute attr(HT_H5_CHECK(H5Aopen(file.get(), kVocabAttr, H5P_DEFAULT), path));
  H5Dataspace attr_space(HT_H5_CHECK(H5Aget_space(attr.get()), path));
  HT_CHECK(H5Sget_simple_extent_npoints(attr_space.get()) == 1, ErrorKind::kIo,
           "token file '{}': the '{}' attribute holds {} values, not one (corrupt?)", path, kVocabAttr,
           H5Sget_simple_extent_npoints(attr_space.get()));
  HT_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &s.vocab_size), path);
  HT_CHECK(s.vocab_size > 0 && s.vocab_size <= 65536, ErrorKind::kIo,
           "token file '{}': vocab_size {} is outside [1, 65536] (ids are stored as uint16; corrupt?)", path,
           s.vocab_size);
  s.train = read_split(file.get(), "train", path);
  s.val = read_split(file.get(), "val", path);
  HT_CHECK(!s.train.empty() && !s.val.empty(), ErrorKind::kInvalidArgument,
           "token file '{}' has an empty split (train {} tokens, val {}); prepare it from more text", path,
           s.train.size(), s.val.size());
  check_ids(s.train, s.vocab_size, "train", path);
  check_ids(s.val, s.vocab_size, "val", path);
  return s;
}

TokenSplits tokenize_bytes(const std::vector<std::string>& inputs, double val_fraction) {
  return tokenize_text(*load_tokenizer("bytes"), inputs, val_fraction);
}

TokenSplits split_tail(std::vector<std::int32_t> tokens, double val_fraction, std::int64_t vocab_size,
                       const std::string& made_of) {
  const auto n_val = std::int64_t(double(tokens.size()) * val_fraction);
  HT_CHECK(n_val >= 2 && std::int64_t(tokens.size()) - n_val >= 2, ErrorKind::kInvalidArgument,
           "the text inputs make only {} {}: too few for a train and a validation split; give more text",
           tokens.size(), made_of);
  TokenSplits s;
  s.vocab_size = vocab_size;
  s.val.assign(tokens.end() - n_val, tokens.end());
  tokens.resize(tokens.size() - std::size_t(n_val));
  s.train = std::move(tokens);
  return s;
}

double unigram_entropy(const std::vector<std::int32_t>& tokens, std::int64_t vocab_size) {
  std::vector<double> counts(std::size_t(vocab_size), 0.0);
  for (std::int32_t t : tokens) counts[std::size_t(t)] += 1.0;
  double h = 0.0;
  for (double c : counts)
    if (c > 0) {
      const double p = c / double(tokens.size());
      h -= p * std::log(p);
    }
  return h;
}

}  // namespace ht::data
