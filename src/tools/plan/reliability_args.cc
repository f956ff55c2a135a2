// ht-plan --reliability (reliability_args.h): the flags, htrun's relaunch
// rules passed to the model, and the output.
#include "reliability_args.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "ht/core/error.h"
#include "ht/plan/run_measurements.h"
#include "htrun/decisions.h"

namespace ht::plan::tool {

namespace {

// htrun's own rules (src/tools/htrun/decisions.h), which the simulator walks.
constexpr RelaunchRules kHtrunRules{.failures_in_a_row = &htrun::failures_in_a_row, .backoff_s = &htrun::backoff_s};

void write(const std::string& table, const std::string& json, const std::string& json_path) {
  if (json_path == "-") {
    std::printf("%s\n", json.c_str());
    return;
  }
  std::fputs(table.c_str(), stdout);
  if (json_path.empty()) return;
  std::ofstream out(json_path);
  out << json << "\n";
  HT_CHECK(out.good(), ErrorKind::kIo, "cannot write the projection to '{}'", json_path);
}

}  // namespace

void ReliabilityArgs::add_to(CLI::App& app) {
  ReliabilityOptions& o = options;
  app.add_flag("--reliability", enabled,
               "project the goodput (ETTR: productive training time / wall time) of a job at a size from a failure "
               "rate and measured recovery costs, and choose its snapshot and checkpoint intervals (defaults: the "
               "costs measured on this project's namespace cluster; docs/benchmarks.md, \"Goodput at scale, "
               "projected\")");
  app.add_option("--hosts", o.hosts, "reliability: hosts in the job");
  app.add_option("--gpus-per-host", o.gpus_per_host, "reliability: GPUs (ranks) per host");
  app.add_option("--mttf-hours", o.mttf_hours,
                 "reliability: the job's mean time to failure, hours (0: Meta's published figures for its GPU count, "
                 "Kokolis et al. 2024: 7.9 h at 1,024 GPUs, 1.8 h at 16,384, 14 min at 131,072, log-log between)");
  app.add_option("--failures-per-hour", failures_per_hour, "reliability: the job's failure rate, instead of --mttf-hours (0: no failures; -1: not given)");
  app.add_option("--memory-recoverable", o.memory_recoverable_share,
                 "reliability: share of failures a memory snapshot recovers (a host and its replica partner lost "
                 "together, or a corrupt state, need disk; 0.9 from Llama 3's interruptions)");
  app.add_option("--step-s", o.step_s, "reliability: one training step, seconds");
  app.add_option("--snapshot-every-steps", snapshot_every,
                 "reliability: the configured memory snapshot interval, steps (0: none, auto: the engine's)");
  app.add_option("--checkpoint-every-steps", o.cadence.checkpoint_every_steps,
                 "reliability: the configured disk checkpoint interval, steps (0: none)");
  app.add_option("--snapshot-stall-s", o.snapshot_stall_s, "reliability: what a memory snapshot costs its step, seconds");
  app.add_option("--checkpoint-stall-s", o.checkpoint_stall_s, "reliability: what a disk checkpoint costs its step, seconds");
  app.add_option("--detect-s", o.detect_s, "reliability: failure to detection, seconds");
  app.add_option("--recover-memory-s", o.recover_memory_s,
                 "reliability: detection to training again from memory and a peer's replica, seconds");
  app.add_option("--recover-disk-s", o.recover_disk_s, "reliability: detection to training again from disk, seconds");
  app.add_option("--relaunch-s", o.relaunch_s,
                 "reliability: of each recovery, the relaunch of the healthy ranks (process start, device and "
                 "communicator set-up, model build), seconds");
  app.add_option("--backoff-s", o.backoff_base_s, "reliability: htrun's --backoff, seconds");
  app.add_option("--job-hours", o.job_hours, "reliability: the job's training time, hours");
  app.add_option("--traces", o.traces, "reliability: simulated failure traces (1000 with --from-report)");
  app.add_option("--seed", o.seed, "reliability: the traces' seed");
  app.add_option("--from-report", from_report,
                 "reliability: project a run's own goodput from what it measured: its htrun_report.json (with "
                 "--fault-free), beside the goodput it measured");
  app.add_option("--fault-free", fault_free,
                 "reliability: with --from-report, the fault-free run's htrun_report.json (its metrics.jsonl beside "
                 "it gives the step time, intervals and stalls)");
}

void ReliabilityArgs::run(CLI::App& app, const std::string& json_path) {
  ReliabilityOptions o = options;
  if (snapshot_every == "auto") {
    o.cadence.snapshot_every_steps = -1;
  } else {
    std::size_t used = 0;
    try {
      o.cadence.snapshot_every_steps = std::stoll(snapshot_every, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    HT_CHECK(used == snapshot_every.size() && o.cadence.snapshot_every_steps >= 0, ErrorKind::kConfig,
             "--snapshot-every-steps '{}': give a number of steps (0: no memory snapshots) or auto", snapshot_every);
  }
  if (failures_per_hour >= 0) {
    HT_CHECK(app.count("--mttf-hours") == 0, ErrorKind::kConfig,
             "--failures-per-hour and --mttf-hours both given: give one (the mean time to failure is 1 / the rate)");
    o.mttf_hours = failures_per_hour > 0 ? 1 / failures_per_hour : std::numeric_limits<double>::infinity();
  }
  HT_CHECK(from_report.empty() == fault_free.empty(), ErrorKind::kConfig,
           "--from-report and --fault-free go together: give the run's htrun_report.json and the fault-free run's");
  if (!from_report.empty()) {
    // A run's few failures: more traces for a mean as steady as its measurement.
    if (app.count("--traces") == 0) o.traces = 1000;
    const RunProjection p = project_run(read_run_measurements(from_report, fault_free), o, kHtrunRules);
    write(format_run_projection(p), run_projection_to_json(p), json_path);
    return;
  }
  const ReliabilityPlan plan = plan_reliability(o, kHtrunRules);
  write(format_reliability(plan), reliability_to_json(plan), json_path);
}

}  // namespace ht::plan::tool
