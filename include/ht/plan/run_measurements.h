// ht::plan run measurements: what a run under htrun measured (its
// htrun_report.json; the fault-free run's report and metrics.jsonl) as the
// reliability model's inputs, and the projection of the run's own goodput
// beside the goodput it measured (docs/htrun.md, "The report").
#pragma once

#include <cstdint>
#include <string>

#include "ht/plan/reliability.h"

namespace ht::plan {

struct RunMeasurements {
  // The run with failures, from its report.
  double wall_s = 0, productive_s = 0, goodput = 0;
  int incidents = 0;
  double detect_s = 0;  // mean detection latency (from the culprit's last sign of life)
  /// Incidents whose relaunch resumed from memory ("memory", "memory+peer")
  /// or disk, and their mean recovery (detection to the first step after it).
  int from_memory = 0, from_disk = 0;
  double recover_memory_s = 0, recover_disk_s = 0;
  /// The launches after incidents: from the launch to its first step, less
  /// one step (every rank's relaunch with the state's restore, which was a
  /// few ms here).
  int relaunches = 0;
  double relaunch_s = 0;
  double steps_lost_mean = 0;

  // The fault-free run: its report, and its metrics.jsonl when there is one.
  double fault_free_wall_s = 0, fault_free_productive_s = 0, fault_free_goodput = 0;
  std::int64_t steps = 0;  // step lines (0: no metrics.jsonl)
  double step_s = 0;       // their mean time (htrun's productive time is their sum)
  /// The most common gap between snapshots and between saves (0: none), and
  /// their steps' median time beyond the median of the steps without either.
  std::int64_t snapshot_every_steps = 0, checkpoint_every_steps = 0;
  double snapshot_stall_s = 0, checkpoint_stall_s = 0;
};

/// Reads the run's report, the fault-free run's report and its
/// metrics.jsonl (beside it). Throws ht::Error kIo when a file cannot be
/// read, kConfig when a report is not htrun's or lacks what is needed.
RunMeasurements read_run_measurements(const std::string& report_path, const std::string& fault_free_report_path);

/// `base` with what the run measured in its place: failures at incidents /
/// wall time, the mean detection and recovery by tier (a tier no incident
/// used keeps base's difference from the other), the share memory
/// recovered, the relaunch, the fault-free goodput as the ETTR without
/// failures, a job as long as the fault-free run's training, and its step
/// time, intervals and stalls.
ReliabilityOptions options_from_run(const RunMeasurements& m, ReliabilityOptions base);

/// The run's own goodput projected from what it measured.
struct RunProjection {
  RunMeasurements measured;
  ReliabilityOptions options;
  EttrEstimate projected;

  /// Projected less measured goodput, in points of goodput.
  double difference_points() const { return 100 * (projected.ettr_mean - measured.goodput); }
};
RunProjection project_run(const RunMeasurements& m, const ReliabilityOptions& base, const RelaunchRules& rules);

/// A `#` preamble (what was measured) and one line: projected, measured, the difference.
std::string format_run_projection(const RunProjection& p);
/// One JSON object: "measured", "options", "projected", "difference_points".
std::string run_projection_to_json(const RunProjection& p);

}  // namespace ht::plan
