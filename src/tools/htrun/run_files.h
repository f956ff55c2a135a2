// What the run directory holds for the supervisor, found and read: rank 0's
// metrics.jsonl (its format is the run protocol's,
// ht/resilience/run_protocol.h), the launch epoch and the committed
// checkpoints. (The ranks' heartbeats and exit records come through their
// node agents, not the run directory.) This file only walks directories
// and files.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ht/resilience/run_protocol.h"

namespace htrun {

/// Follows <run-dir>/metrics.jsonl as the program writes it: each poll returns
/// the complete lines added since the last (run, step and eval lines; a line
/// that is damaged or of another type is skipped). The program truncates the
/// file when it starts; the tail then starts over from the top (it knows the
/// file by its first line), so old lines may come again: callers tell
/// launches apart by time and epoch.
class MetricsTail {
 public:
  explicit MetricsTail(const std::string& run_dir);
  std::vector<ht::resilience::MetricsLine> poll();

 private:
  std::string path_, first_line_;
  std::uint64_t offset_ = 0;
};

/// The epoch of the newest launch into `run_dir` (<run_dir>/launch_epoch), 0 when none.
std::int64_t read_launch_epoch(const std::string& run_dir);
/// Writes <run_dir>/launch_epoch atomically: from now on the ranks of older
/// launches fence themselves (resilience/rank_guard.h).
void write_launch_epoch(const std::string& run_dir, std::int64_t epoch);
/// The step of the newest committed checkpoint under <run-dir>/checkpoints, or 0.
std::int64_t latest_checkpoint_step(const std::string& run_dir);

}  // namespace htrun
