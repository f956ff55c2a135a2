// What the ranks leave in the run directory for the supervisor: heartbeats
// (<run-dir>/heartbeat/rank_R.json), exit records (<run-dir>/exit/rank_R.json;
// ht::resilience::RankGuard writes both) and committed checkpoints.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace htrun {

/// The last step completed by a rank in `step`, `phase` (the phases after a
/// step: "step-done", "evaluate", "finish").
inline std::int64_t completed_step(std::int64_t step, const std::string& phase) {
  return phase == "step-done" || phase == "evaluate" || phase == "finish" ? step : step - 1;
}

struct Heartbeat {
  std::int64_t epoch = 0;  // the launch that wrote it (0: not said)
  int rank = -1;
  int pid = 0;
  std::string host;
  std::int64_t step = 0;
  std::string phase;
  double time_s = 0, progress_s = 0;  // last beat, last change of step or phase
};

struct ExitRecord {
  std::int64_t epoch = 0;
  int rank = -1;
  int code = 0;
  std::string kind;        // "hang", "divergence", "corruption", "preempted", "straggler", "error", ...
  std::int64_t step = 0;  // the step it was in
  std::string phase;
  double time_s = 0;
  std::string message;
  std::vector<int> blamed;  // ranks the writer names as the cause (a straggler), if any
};

/// A line of rank 0's <run-dir>/metrics.jsonl: "run" (training began, after
/// start-up and the checkpoint load) or "step" (a step completed).
struct MetricsRecord {
  std::string type;
  std::int64_t step = 0;
  double time_s = 0;  // when written (wall clock, as the heartbeats); 0 when the line has no time_ms
  double step_s = 0;  // a step's own time
  /// A run line of a resumed launch: the step it resumed from and the tier
  /// that held it ("memory", "memory+peer", "disk"); -1 and "" otherwise.
  std::int64_t resumed_from = -1;
  std::string resume_tier;
  std::int64_t epoch = 0;  // the launch that wrote it (0: not said)
};

/// Follows <run-dir>/metrics.jsonl as the program writes it: each poll returns
/// the complete lines added since the last. The program truncates the file
/// when it starts; the tail then starts over from the top (it knows the file
/// by its first line), so old lines may come again: callers tell launches
/// apart by time.
class MetricsTail {
 public:
  explicit MetricsTail(std::string run_dir);
  std::vector<MetricsRecord> poll();

 private:
  std::string path_, first_line_;
  std::uint64_t offset_ = 0;
};

/// The records of launch `epoch` (and those that say no epoch); every one for epoch 0.
std::map<int, Heartbeat> read_heartbeats(const std::string& run_dir, std::int64_t epoch = 0);
/// Oldest first.
std::vector<ExitRecord> read_exit_records(const std::string& run_dir, std::int64_t epoch = 0);
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
