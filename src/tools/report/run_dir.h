// ht-report's view of a run directory: the records a training program and
// htrun left there (metrics.jsonl, htrun_report.json, htrun_job.log,
// checkpoints/*/manifest.json), read once and held as plain values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ht/resilience/run_protocol.h"
#include "ht/resilience/supervisor_report.h"

namespace ht::report {

/// The lines of metrics.jsonl, as the run protocol reads them
/// (ht/resilience/run_protocol.h; written by src/train/metrics.cc).
using StepRecord = ht::resilience::StepLine;
using EvalRecord = ht::resilience::EvalLine;

/// A step's fields ending in `_bytes` (memory figures), if the program
/// recorded any, as numbers.
std::map<std::string, double> memory_bytes(const StepRecord& step);

/// A progress line of htrun_job.log (ht::train::parse_progress_line):
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
  ht::resilience::RunLine run;              // the latest run line (no fields when none)
  std::vector<StepRecord> steps;            // in step order, each step once (its last record)
  std::vector<EvalRecord> evals;            // in step order, each step once (its last record)
  std::vector<CheckpointInfo> checkpoints;  // in step order
  std::optional<ht::resilience::SupervisorReport> htrun;  // htrun_report.json, when htrun ran the job
  std::vector<LoggedStep> logged_steps;     // htrun_job.log, every launch, in log order
  int launches = 0;                         // launches seen in htrun_job.log
};

/// Reads the run directory. Throws ht::IoError (kIo) when the directory or
/// metrics.jsonl is missing or unreadable, and (kInvalidArgument) when
/// metrics.jsonl holds no step or a damaged line (not JSON, or a field of the
/// wrong type) before its last (a crash cuts the last short); the message names
/// the file and says what to run. htrun's files and the checkpoints are
/// optional: a manifest that does not read (ht-ckpt verify says why) is
/// skipped, a damaged htrun_report.json throws. Every record is read with its
/// writer's reader: the run protocol's (metrics.jsonl, htrun_report.json),
/// the checkpointer's (manifest.json), fit's (the progress lines).
RunDir read_run_dir(const std::string& path);

}  // namespace ht::report
