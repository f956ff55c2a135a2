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
  int rank = -1;
  int pid = 0;
  std::string host;
  std::int64_t step = 0;
  std::string phase;
  double time_s = 0, progress_s = 0;  // last beat, last change of step or phase
};

struct ExitRecord {
  int rank = -1;
  int code = 0;
  std::string kind;        // "hang", "divergence", "corruption", "preempted", "straggler", "error", ...
  std::int64_t step = 0;  // the step it was in
  std::string phase;
  double time_s = 0;
  std::string message;
  std::vector<int> blamed;  // ranks the writer names as the cause (a straggler), if any
};

std::map<int, Heartbeat> read_heartbeats(const std::string& run_dir);
/// Oldest first.
std::vector<ExitRecord> read_exit_records(const std::string& run_dir);
/// Removes the heartbeats and exit records of an earlier launch.
void clear_rank_files(const std::string& run_dir);
/// The step of the newest committed checkpoint under <run-dir>/checkpoints, or 0.
std::int64_t latest_checkpoint_step(const std::string& run_dir);

}  // namespace htrun
