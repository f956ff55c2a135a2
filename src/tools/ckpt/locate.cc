// Which step directory a command-line path names, and small formatting helpers.
#include <filesystem>

#include "ckpt/manifest.h"
#include "ckpt_tool.h"
#include "ht/ckpt/checkpoint.h"

namespace ht::ckpt::tool {

namespace fs = std::filesystem;

std::string dims_str(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return "scalar";
  return fmt::format("{}", fmt::join(shape, "x"));
}

std::string resolve_step_dir(const std::string& path, std::int64_t step) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw UsageError(
        fmt::format("'{}' is not a directory: pass a checkpoint directory or one of its step_N directories", path));
  // A step directory: committed (it has a manifest), or named like one (an
  // interrupted save or a lost manifest, which verify reports as such).
  fs::path p(path);
  if (p.filename().empty()) p = p.parent_path();  // "dir/" names "dir"
  const std::string name = p.filename().string();
  const bool tmp = name.size() > 4 && name.ends_with(".tmp");
  if (fs::exists(p / detail::kManifestName, ec) || checkpoint_step(name) >= 0 ||
      (tmp && checkpoint_step(name.substr(0, name.size() - 4)) >= 0)) {
    if (step >= 0)
      throw UsageError(
          fmt::format("--step {} applies to a checkpoint directory, and '{}' is a step directory: pass "
                      "its parent, or drop --step",
                      step, path));
    return path;
  }
  const std::vector<CommittedCheckpoint> committed = committed_checkpoints(path);
  if (committed.empty())
    throw UsageError(
        fmt::format("'{}' holds no committed checkpoint (no step_N directory with a {})", path, detail::kManifestName));
  if (step < 0) return committed.back().dir;
  std::vector<std::int64_t> steps;
  for (const CommittedCheckpoint& c : committed) {
    if (c.step == step) return c.dir;
    steps.push_back(c.step);
  }
  throw UsageError(fmt::format("'{}' holds no committed checkpoint of step {}; it holds steps {}", path, step,
                               fmt::join(steps, ", ")));
}

}  // namespace ht::ckpt::tool
