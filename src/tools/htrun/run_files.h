// What the ranks leave in the run directory for the supervisor, found and
// read: heartbeats, exit records and metrics.jsonl (their format is the run
// protocol's, ht/resilience/run_protocol.h), the launch epoch and the
// committed checkpoints. This file only walks directories and files.
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

/// The heartbeats of launch `epoch` (and those that say no epoch; every one
/// for epoch 0), by rank. A file being replaced is skipped: the next poll reads it.
std::map<int, ht::resilience::Heartbeat> read_heartbeats(const std::string& run_dir, std::int64_t epoch = 0);
/// The exit records of launch `epoch`, as read_heartbeats; oldest first.
std::vector<ht::resilience::ExitRecord> read_exit_records(const std::string& run_dir, std::int64_t epoch = 0);
/// The epoch of the newest launch into `run_dir` (<run_dir>/launch_epoch), 0 when none.
std::int64_t read_launch_epoch(const std::string& run_dir);
/// Writes <run_dir>/launch_epoch atomically: from now on the ranks of older
/// launches fence themselves (resilience/rank_guard.h).
void write_launch_epoch(const std::string& run_dir, std::int64_t epoch);
/// Removes the heartbeats and exit records of an earlier launch.
void clear_rank_files(const std::string& run_dir);
/// The step of the newest committed checkpoint under <run-dir>/checkpoints, or 0.
std::int64_t latest_checkpoint_step(const std::string& run_dir);

}  // namespace htrun
