// ht-ckpt export: one consolidated HDF5 file of full tensors from a sharded
// checkpoint, written atomically (temporary file, sync, rename). A padded
// vocabulary's matrices are exported with their real rows only.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "ckpt/assemble.h"
#include "ckpt/manifest.h"
#include "ckpt/rank_file.h"
#include "ckpt_tool.h"
#include "core/h5_check.h"

namespace ht::ckpt::tool {
namespace {

namespace fs = std::filesystem;
using ht::detail::H5Attribute;
using ht::detail::H5Dataset;
using ht::detail::H5Dataspace;
using ht::detail::H5File;
using H5Type = ht::detail::H5Id<H5Tclose>;

void write_i64_attr(hid_t obj, const char* name, std::int64_t value, const std::string& path) {
  H5Dataspace space(HT_H5_CHECK(H5Screate(H5S_SCALAR), path));
  H5Attribute a(HT_H5_CHECK(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), path));
  HT_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), path);
}

// A variable-length UTF-8 string: h5py reads it as str.
void write_str_attr(hid_t obj, const char* name, const std::string& value, const std::string& path) {
  H5Type type(HT_H5_CHECK(H5Tcopy(H5T_C_S1), path));
  HT_H5_CHECK(H5Tset_size(type.get(), H5T_VARIABLE), path);
  HT_H5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8), path);
  H5Dataspace space(HT_H5_CHECK(H5Screate(H5S_SCALAR), path));
  H5Attribute a(HT_H5_CHECK(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), path));
  const char* s = value.c_str();
  HT_H5_CHECK(H5Awrite(a.get(), type.get(), &s), path);
}

// A padded vocabulary matrix (PieceInfo::real_rows) is written without its
// padding rows, so that the export loads into a model of the real
// vocabulary; the dataset's "padded_rows" attribute says how many rows the
// checkpoint stores.
void write_tensor(hid_t file, const std::string& name, const std::string& kind, const Tensor& stored,
                  std::int64_t real_rows, const std::string& path) {
  const bool padded = real_rows >= 0 && stored.ndim() >= 1 && real_rows < stored.size(0);
  const Tensor full = padded ? stored.slice(0, real_rows) : stored;
  std::vector<hsize_t> dims(full.shape().begin(), full.shape().end());
  H5Dataspace space(dims.empty() ? HT_H5_CHECK(H5Screate(H5S_SCALAR), path)
                                 : HT_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr), path));
  H5Dataset ds(HT_H5_CHECK(
      H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path));
  if (full.numel() > 0)
    HT_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, full.data_ptr()), path);
  write_str_attr(ds.get(), "kind", kind, path);
  if (padded) write_i64_attr(ds.get(), "padded_rows", stored.size(0), path);
}

}  // namespace

int export_checkpoint(const std::string& step_dir, const std::string& out_path, const std::vector<std::string>& kinds) {
  const detail::Manifest m = detail::read_manifest(step_dir);
  const auto groups = detail::pieces_by_tensor(m.pieces);
  std::set<std::string> tensors, available;
  for (const detail::PieceInfo& p : m.pieces) {
    tensors.insert(p.tensor);
    available.insert(p.kind);
  }
  for (const std::string& k : kinds)
    if (!available.contains(k))
      throw UsageError(
          fmt::format("checkpoint '{}' holds no '{}' state; it holds {}", step_dir, k, fmt::join(available, ", ")));
  // Dataset names, checked up front so that a clash fails before any writing.
  struct Item {
    std::string dataset, kind;
    const std::vector<detail::PieceInfo>* pieces;
  };
  std::vector<Item> items;
  std::set<std::string> names;
  for (const std::string& t : tensors)
    for (const std::string& k : kinds) {
      const auto it = groups.find(t + "|" + k);
      HT_CHECK(it != groups.end(), ErrorKind::kIo,
               "checkpoint '{}' lacks {} ({}) that other tensors have: run ht-ckpt verify on it", step_dir, t, k);
      Item item{k == "master" ? t : t + "." + k, k, &it->second};
      HT_CHECK(names.insert(item.dataset).second, ErrorKind::kInvalidArgument,
               "export: the dataset name '{}' would be used twice (a tensor is named like another's {} state)",
               item.dataset, k);
      items.push_back(std::move(item));
    }

  // Written beside the target (same file system, so the rename is atomic).
  const fs::path target = fs::absolute(out_path);
  std::error_code ec;
  if (!fs::is_directory(target.parent_path(), ec))
    throw UsageError(
        fmt::format("cannot write '{}': the directory {} does not exist", out_path, target.parent_path().string()));
  const std::string tmp =
      (target.parent_path() / fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid())).string();
  try {
    {
      H5File file(HT_H5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), tmp));
      for (const Item& item : items)
        write_tensor(file.get(), item.dataset, item.kind, detail::assemble_tensor(step_dir, *item.pieces),
                     item.pieces->front().real_rows, tmp);
      write_i64_attr(file.get(), "step", m.run.step, tmp);
      write_i64_attr(file.get(), "optimizer_steps", m.run.optimizer_steps, tmp);
      write_i64_attr(file.get(), "consumed_samples", m.run.consumed_samples, tmp);
      write_str_attr(file.get(), "data_state", client_state_json(m.run.data), tmp);
      write_str_attr(file.get(), "client_state", client_state_json(m.run.client), tmp);
      write_str_attr(file.get(), "model", m.run.model, tmp);
      write_str_attr(file.get(), "layout", m.layout, tmp);
      write_str_attr(file.get(), "library_version", m.library_version, tmp);
      write_str_attr(file.get(), "git_commit", m.git_commit, tmp);
      write_str_attr(file.get(), "kinds", fmt::format("{}", fmt::join(kinds, ",")), tmp);
      write_str_attr(file.get(), "source", fs::absolute(step_dir).lexically_normal().string(), tmp);
      HT_H5_CHECK(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), tmp);
    }
    detail::sync_path(tmp);
    fs::rename(tmp, target);
    detail::sync_path(target.parent_path().string());
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  return int(items.size());
}

}  // namespace ht::ckpt::tool
