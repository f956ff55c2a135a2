// ht-report's view of a run directory: the records a training program and
// htrun left there (metrics.jsonl, htrun_report.json, htrun_job.log,
// checkpoints/*/manifest.json), read once and held as plain values.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ht::report {

/// One `{"type":"step"}` line of metrics.jsonl (src/train/metrics.cc).
struct StepRecord {
  std::int64_t step = 0;
  double time_ms = 0;  // wall clock (ms since the epoch) when the step completed
  double loss = 0, lr = 0, grad_norm = 0, step_ms = 0;
  std::int64_t tokens = 0;  // tokens of the whole job in this step
  double tokens_per_s = 0, loss_scale = 1;
  bool skipped = false;
  std::int64_t skipped_steps = 0;  // skipped so far (cumulative)
  bool checkpoint = false, snapshot = false;
  /// Fields ending in `_bytes` (memory figures), if the program recorded any.
  std::map<std::string, double> memory_bytes;
};

struct EvalRecord {
  std::int64_t step = 0;
  double val_loss = 0;
};

/// A progress line of htrun_job.log (`step 12/24 | loss 5.2 | ... | 7 ms | ...`):
/// it keeps the steps of every launch, where metrics.jsonl keeps the last one's.
struct LoggedStep {
  std::int64_t step = 0;
  double loss = 0;
  int launch = 0;  // 0 for the first launch; a step number going back starts the next
};

/// A committed checkpoint (checkpoints/step_NNNNNNNN/manifest.json).
struct CheckpointInfo {
  std::int64_t step = 0;
  std::int64_t bytes = 0;  // all rank files together
  std::string layout;
  int world = 0;
};

struct RunDir {
  std::string path;
  nlohmann::json run = nlohmann::json::object();  // the latest `{"type":"run"}` line, {} when none
  std::vector<StepRecord> steps;                  // in step order, each step once (its last record)
  std::vector<EvalRecord> evals;
  std::vector<CheckpointInfo> checkpoints;  // in step order
  std::optional<nlohmann::json> htrun;      // htrun_report.json, when htrun ran the job
  std::vector<LoggedStep> logged_steps;     // htrun_job.log, every launch, in log order
  int launches = 0;                         // launches seen in htrun_job.log
};

/// Reads the run directory. Throws ht::IoError (kIo) when the directory or
/// metrics.jsonl is missing or unreadable, and (kInvalidArgument) when
/// metrics.jsonl holds no step or a line that is not JSON; the message names
/// the file and says what to run. htrun's files and the checkpoints are
/// optional: a damaged manifest is skipped, a damaged htrun_report.json throws.
RunDir read_run_dir(const std::string& path);

}  // namespace ht::report
