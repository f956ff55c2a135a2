// ht-ckpt verify: reads every piece of a checkpoint and checks the manifest,
// the rank files and the tiling of every tensor against each other.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "ckpt/assemble.h"
#include "ckpt/manifest.h"
#include "ckpt/rank_file.h"
#include "ckpt_tool.h"

namespace ht::ckpt::tool {
namespace {

namespace fs = std::filesystem;
using detail::PieceInfo;

// Where a rank file's own attributes for a dataset disagree with the manifest's entry ("" if they agree).
std::string attribute_mismatch(const PieceInfo& in_file, const PieceInfo& listed) {
  std::vector<std::string> what;
  if (in_file.global_shape != listed.global_shape)
    what.push_back(
        fmt::format("global shape {} vs {}", shape_str(in_file.global_shape), shape_str(listed.global_shape)));
  const nn::ParamLayout &a = in_file.layout, &b = listed.layout;
  if (a.tp_split_dim != b.tp_split_dim || a.tp_parts != b.tp_parts || a.tp_rank != b.tp_rank || a.tp_size != b.tp_size)
    what.push_back("tensor-parallel layout");
  if (in_file.begin != listed.begin || in_file.end != listed.end)
    what.push_back(fmt::format("range [{}, {}) vs [{}, {})", in_file.begin, in_file.end, listed.begin, listed.end));
  if (in_file.checksum != listed.checksum)
    what.push_back(fmt::format("checksum {:016x} vs {:016x}", in_file.checksum, listed.checksum));
  return what.empty() ? "" : fmt::format("{}", fmt::join(what, ", "));
}

}  // namespace

// In order: the manifest (unreadable: nothing else can be checked), the list
// of rank files against the world size, each rank file (present, of the
// recorded size, holding exactly the datasets the manifest lists with the same
// attributes), each piece's data against its checksum, and finally how the
// pieces of each (tensor, kind) tile the tensor.
namespace {

// Rank files: one per rank of the world that saved, each listed once.
std::map<std::string, const detail::RankFileEntry*> listed_files(const detail::Manifest& m,
                                                                 std::vector<std::string>& problems) {
  std::set<int> ranks;
  std::map<std::string, const detail::RankFileEntry*> files;
  for (const detail::RankFileEntry& f : m.files) {
    if (f.rank < 0 || f.rank >= m.world || !ranks.insert(f.rank).second)
      problems.push_back(fmt::format("{}: rank file {} is listed for rank {}, outside a world of {} or twice",
                                     detail::kManifestName, f.file, f.rank, m.world));
    files[f.file] = &f;
  }
  for (int r = 0; r < m.world; ++r)
    if (!ranks.contains(r))
      problems.push_back(
          fmt::format("{}: no rank file is listed for rank {} of {}", detail::kManifestName, r, m.world));
  return files;
}

// One rank file against the manifest: there, of its size, with the datasets
// the manifest lists (`listed`) and no others, their attributes agreeing.
// False when its pieces are not worth reading (missing or unreadable).
bool check_rank_file(const std::string& path, const std::string& name, const detail::RankFileEntry& entry,
                     const std::vector<const PieceInfo*>& listed, std::vector<std::string>& problems) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    problems.push_back(fmt::format("rank file '{}' (rank {}) is missing", path, entry.rank));
    return false;
  }
  const auto size = std::int64_t(fs::file_size(path, ec));
  if (!ec && size != entry.bytes)
    problems.push_back(fmt::format("rank file '{}' is {} bytes where the manifest says {} (truncated or replaced?)",
                                   path, size, entry.bytes));
  std::vector<PieceInfo> index;
  try {
    index = detail::read_piece_index(path, name);
  } catch (const Error& e) {
    problems.push_back(e.message());
    return false;
  }
  std::map<std::string, const PieceInfo*> in_file;
  for (const PieceInfo& p : index) in_file[p.dataset] = &p;
  for (const PieceInfo* p : listed) {
    const auto it = in_file.find(p->dataset);
    if (it == in_file.end()) continue;  // read_piece names the missing dataset
    if (const std::string d = attribute_mismatch(*it->second, *p); !d.empty())
      problems.push_back(fmt::format(
          "checkpoint file '{}': dataset '{}' has attributes that disagree with the manifest ({})", path, p->dataset,
          d));
    in_file.erase(it);
  }
  for (const auto& [dataset, p] : in_file)
    problems.push_back(fmt::format("checkpoint file '{}': dataset '{}' is not listed in the manifest", path, dataset));
  return true;
}

// Every tensor holds the same kinds (master and the optimizer's state), and
// each kind's pieces tile its tensor.
void check_tiling(const detail::Manifest& m, std::vector<std::string>& problems) {
  std::set<std::string> kinds;
  std::map<std::string, std::set<std::string>> kinds_of;
  const auto groups = detail::pieces_by_tensor(m.pieces);
  for (const auto& [key, pieces] : groups) {
    kinds.insert(pieces.front().kind);
    kinds_of[pieces.front().tensor].insert(pieces.front().kind);
    for (std::string& problem : detail::tiling_problems(pieces)) problems.push_back(std::move(problem));
  }
  for (const auto& [tensor, has] : kinds_of)
    for (const std::string& k : kinds)
      if (!has.contains(k))
        problems.push_back(fmt::format("{}: tensor {} has no '{}' pieces where other tensors have them",
                                       detail::kManifestName, tensor, k));
  if (m.pieces.empty()) problems.push_back(fmt::format("{}: lists no pieces", detail::kManifestName));
}

}  // namespace

VerifyReport verify_checkpoint(const std::string& step_dir) {
  VerifyReport report;
  std::vector<std::string>& problems = report.problems;
  detail::Manifest m;
  try {
    m = detail::read_manifest(step_dir);
  } catch (const Error& e) {
    problems.push_back(e.message());
    return report;
  }
  report.step = m.run.step;
  report.files = int(m.files.size());
  report.pieces = m.pieces.size();
  const std::int64_t named_step = checkpoint_step(fs::path(step_dir).lexically_normal().filename().string());
  if (named_step >= 0 && named_step != m.run.step)
    problems.push_back(fmt::format("{}: the manifest is of step {}, the directory of step {}", detail::kManifestName,
                                   m.run.step, named_step));
  const std::map<std::string, const detail::RankFileEntry*> files = listed_files(m, problems);
  std::map<std::string, std::vector<const PieceInfo*>> listed;  // per file
  for (const PieceInfo& p : m.pieces) {
    listed[p.file].push_back(&p);
    if (!files.contains(p.file))
      problems.push_back(fmt::format("{}: dataset '{}' is said to be in {}, which is not among the rank files",
                                     detail::kManifestName, p.dataset, p.file));
  }
  std::set<std::string> readable;  // rank files whose pieces are worth reading
  for (const auto& [name, entry] : files)
    if (check_rank_file((fs::path(step_dir) / name).string(), name, *entry, listed[name], problems))
      readable.insert(name);
  for (const PieceInfo& p : m.pieces) {
    if (!readable.contains(p.file)) continue;  // already reported: missing or unreadable file
    try {
      report.bytes += std::int64_t(detail::read_piece((fs::path(step_dir) / p.file).string(), p).nbytes());
    } catch (const Error& e) {
      problems.push_back(e.message());
    }
  }
  check_tiling(m, problems);
  return report;
}

}  // namespace ht::ckpt::tool
