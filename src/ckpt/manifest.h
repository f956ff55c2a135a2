// Private: a checkpoint's manifest.json — the run state, the layout it was
// saved under, every rank file and every piece with its checksum.
#pragma once

#include <string>
#include <vector>

#include "ckpt/rank_file.h"
#include "ht/ckpt/checkpoint.h"

namespace ht::ckpt::detail {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr int kFormatVersion = 2;  // 2: the data position and client state as JSON objects

struct RankFileEntry {
  int rank = 0;
  std::string file;
  std::int64_t bytes = 0;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string library_version, git_commit;
  RunState run;
  std::string layout;  // "pp2 x dp2 x tp2", descriptive
  int world = 1;
  std::vector<RankFileEntry> files;
  std::vector<PieceInfo> pieces;
};

/// The text of `m`'s manifest.json.
std::string manifest_text(const Manifest& m);
/// Writes `<step dir>/manifest.json` and syncs it.
void write_manifest(const std::string& step_dir, const Manifest& m);
/// Reads and checks a step directory's manifest; IoError naming what is wrong.
Manifest read_manifest(const std::string& step_dir);
/// The same from the file's text (`path` and `step_dir` name it in errors):
/// a manifest that came over the network (a memory snapshot's replica).
Manifest parse_manifest(const std::string& text, const std::string& path, const std::string& step_dir);


}  // namespace ht::ckpt::detail
