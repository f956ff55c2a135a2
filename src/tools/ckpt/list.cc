// ht-ckpt list: the committed checkpoints of a directory, oldest first, and
// the leftovers of interrupted saves.
#include <algorithm>
#include <filesystem>

#include "ckpt/manifest.h"
#include "ckpt_tool.h"
#include "ht/ckpt/checkpoint.h"

namespace ht::ckpt::tool {

namespace fs = std::filesystem;

int list_checkpoints(const std::string& dir, std::FILE* out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError(fmt::format("'{}' is not a directory", dir));
  if (fs::exists(fs::path(dir) / detail::kManifestName, ec))
    throw UsageError(fmt::format("'{}' is a step directory: list its parent, or use inspect / verify on it", dir));

  const std::vector<CommittedCheckpoint> committed = committed_checkpoints(dir);
  std::vector<std::string> leftovers;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".tmp") leftovers.push_back(e.path().filename().string());
  std::sort(leftovers.begin(), leftovers.end());

  fmt::print(out, "# checkpoint directory {}: {} committed checkpoint(s), oldest first\n", dir, committed.size());
  int unreadable = 0;
  if (!committed.empty()) {
    fmt::print(out, "{:>10}  {:<20} {:>5} {:>5} {:>12}  {}\n", "step", "layout", "world", "files", "bytes", "model");
    for (const auto& [step, path] : committed) {
      try {
        const detail::Manifest m = detail::read_manifest(path);
        std::int64_t bytes = 0;
        for (const detail::RankFileEntry& f : m.files) bytes += f.bytes;
        fmt::print(out, "{:>10}  {:<20} {:>5} {:>5} {:>12}  {}\n", step, m.layout, m.world, m.files.size(), bytes,
                   m.run.model);
      } catch (const Error& e) {
        ++unreadable;
        fmt::print(out, "{:>10}  unreadable: {}\n", step, e.message());
      }
    }
  }
  if (!leftovers.empty())
    fmt::print(out, "# {} interrupted save(s) left over (not committed; training removes them at its next start): {}\n",
               leftovers.size(), fmt::join(leftovers, " "));
  return unreadable;
}

}  // namespace ht::ckpt::tool
