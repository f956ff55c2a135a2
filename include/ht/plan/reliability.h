// ht::plan reliability model: a training job's effective training time ratio
// (ETTR, goodput: productive training time / wall time) at a given size, from
// a failure rate and measured recovery costs, and the snapshot and checkpoint
// intervals that maximise it, by walking seeded failure traces.
//
// A trace is a job of `job_hours` of training (its steps at `step_s`) hit by
// failures at exponential intervals (a Poisson process at 1 / MTTF over wall
// time, recoveries included). Training runs at one step per `step_s` plus
// the stalls (a snapshot's every so many steps, a checkpoint's) or, when a
// run measured it, at `fault_free_efficiency`. Each failure ends the launch:
// its detection, htrun's back-off (htrun::failures_in_a_row and
// htrun::backoff_s: none after a launch that trained past the step it
// resumed from, else doubling), the recovery (from memory and a peer's
// replica, or from disk for the share memory cannot recover), then training
// again from the newest state left: the last memory snapshot (or
// checkpoint, or the step resumed from) for a failure memory recovers, the
// last disk checkpoint otherwise; the work since is lost. A failure during a
// recovery ends it (a launch without progress: the back-off grows). When
// snapshots and saves fall due is the engine's own rule
// (train::SnapshotCadence, train::CheckpointCadence), walked over simulated
// step times: see reliability.cc.
//
// Every function here is pure: the same options and seed give the same
// figures. Errors: ht::Error kConfig naming the option and what to do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ht::plan {

/// Meta's published job mean time to failure on `gpus` GPUs, in hours: 7.9 h
/// at 1,024 GPUs, 1.8 h at 16,384 and 14 min at 131,072 (Kokolis et al.,
/// "Revisiting Reliability in Large-Scale Machine Learning Research
/// Clusters", 2024), interpolated on a log-log scale between them; below
/// 1,024 and above 131,072 the nearest figure's per-GPU failure rate (MTTF
/// inversely proportional to the GPU count). Throws kConfig for gpus < 1.
double published_mttf_hours(std::int64_t gpus);

/// Young's optimal interval between checkpoints, sqrt(2 C M), in seconds,
/// for a checkpoint cost `cost_s` and a mean time between the failures it
/// serves `mtbf_s` (infinite when none needs it). Daly's higher-order
/// refinement differs by less than C, which is far below the interval here.
double young_daly_interval_s(double cost_s, double mtbf_s);

/// htrun's relaunch rules, passed in: they live in htrun's static library
/// (htrun_core, src/tools/htrun/decisions.h), which links this library, so
/// this library cannot link them back. ht-plan and the tests pass
/// htrun::failures_in_a_row and htrun::backoff_s.
struct RelaunchRules {
  /// Launches in a row that failed without training past the step they
  /// resumed from, counting the one that just ended.
  int (*failures_in_a_row)(int before, std::int64_t reached, std::int64_t resume_step) = nullptr;
  /// The wait before the next launch, from the detection.
  double (*backoff_s)(int failures_in_a_row, double base_s) = nullptr;
};

/// Snapshot and checkpoint intervals as the engine's flags give them.
struct Cadence {
  std::int64_t snapshot_every_steps = 10;      // --mem-ckpt-every: 0 none, -1 auto
  std::int64_t checkpoint_every_steps = 100;   // --ckpt-every: 0 none

  friend bool operator==(const Cadence&, const Cadence&) = default;
};

/// The job, its failures and its measured costs. The defaults are the
/// figures measured on this project's namespace cluster (two hosts of one
/// rank, the test GPT; docs/benchmarks.md, "Goodput at scale, projected"),
/// except memory_recoverable_share, an outside figure.
struct ReliabilityOptions {
  std::int64_t hosts = 2;
  std::int64_t gpus_per_host = 1;
  /// The job's mean time to failure; 0: published_mttf_hours(hosts x
  /// gpus_per_host); infinity: no failures.
  double mttf_hours = 0;
  /// The share of failures a memory snapshot recovers: a lost host's state
  /// comes from its peer's replica, but two hosts that replicate to each
  /// other lost together (a rack's switch) and a corrupt state need disk. Of
  /// Llama 3's 419 unplanned interruptions ("The Llama 3 Herd of Models",
  /// Meta, 2024, table 5), 35 were network switches or cables and 6 silent
  /// data corruption: about 10%.
  double memory_recoverable_share = 0.9;

  double step_s = 0.0052;              // one training step
  Cadence cadence;                     // the one configured
  double snapshot_stall_s = 0.0004;    // what a memory snapshot costs the step it is taken at
  double checkpoint_stall_s = 0.003;   // what a disk checkpoint costs the step it is saved at
  /// The measured ETTR of the job without failures (a fault-free run's
  /// goodput), which then replaces the stall model: its start-up and every
  /// stall are in it. 0: 1 - the stalls' share of the wall time.
  double fault_free_efficiency = 0;

  double detect_s = 0.5;               // failure to detection
  double recover_memory_s = 1.0;       // detection to training again, from memory and a peer's replica
  double recover_disk_s = 1.25;        // detection to training again, from disk
  /// Of each recovery, the relaunch of the healthy ranks: process start,
  /// device and communicator set-up, model build. The rest is restoring
  /// the state and the first step.
  double relaunch_s = 0.9;
  double backoff_base_s = 1.0;         // htrun --backoff

  double job_hours = 168;              // training time the job needs, without stalls
  int traces = 200;
  std::uint64_t seed = 1;

  std::int64_t gpus() const { return hosts * gpus_per_host; }
};

/// Throws kConfig naming the first option out of range and what to give.
void validate(const ReliabilityOptions& o);

/// Mean seconds a failure costs, by where they go. A failure that ends a
/// recovery counts what that recovery had spent by then.
struct FailureCost {
  double detect_s = 0;
  double backoff_s = 0;
  double relaunch_s = 0;     // relaunching the healthy ranks
  double restore_s = 0;      // the rest of the recovery: the state restored, the first step
  double lost_work_s = 0;    // training whose steps were lost (stalls included)

  double total_s() const { return detect_s + backoff_s + relaunch_s + restore_s + lost_work_s; }
};

/// One cadence over every trace.
struct EttrEstimate {
  /// The intervals simulated, in steps (0: none), as the engine's cadences
  /// settled on them; `cadence` is what was asked for (auto: -1).
  Cadence cadence;
  std::int64_t snapshot_steps = 0, checkpoint_steps = 0;
  /// The traces' productive time over their wall time, pooled; and the
  /// 10th and 90th percentiles of the traces' own ratios.
  double ettr_mean = 0, ettr_p10 = 0, ettr_p90 = 0;
  double no_failure_ettr = 0;        // the same job without failures: 1 - the stalls' share (or the measured one)
  double failures_per_trace = 0;     // mean
  double from_memory_share = 0;      // of the failures, recovered from memory
  double steps_lost_mean = 0;        // a failure's steps lost: reached less resumed from
  int bounded_traces = 0;            // traces cut at the wall-time bound before the job ended
  FailureCost cost;
};

/// The simulation of `o.cadence` (auto: as the engine settles it) over
/// `o.traces` traces. Throws kConfig on bad options or missing rules.
EttrEstimate simulate_ettr(const ReliabilityOptions& o, const RelaunchRules& rules);

/// The projection: the configured cadence, the engine's auto snapshots,
/// Young/Daly's intervals and the intervals the simulation chooses, with
/// the relaunch's share of a failure's cost.
struct ReliabilityPlan {
  ReliabilityOptions options;
  double mttf_hours = 0;             // as used
  bool published_mttf = false;       // from published_mttf_hours
  double young_daly_snapshot_s = 0, young_daly_checkpoint_s = 0;  // infinity: no failure needs that tier
  EttrEstimate configured, auto_snapshots, young_daly, chosen;
  bool has_auto = false;             // the memory tier is on: auto_snapshots holds the engine's auto
  /// The chosen cadence with each recovery shortened by relaunch_s: what
  /// keeping the healthy ranks alive across a failure would give (the
  /// replacement host's ranks started ahead, as a hot spare).
  EttrEstimate keeping_healthy_ranks;
  std::vector<EttrEstimate> searched;  // every cadence the search simulated, in order

  /// Of a failure's mean cost at the chosen cadence, the relaunch of the healthy ranks.
  double relaunch_share() const;
};

/// Simulates the configured cadence, the engine's auto snapshots and
/// Young/Daly's intervals, then searches from the best of them: snapshot
/// intervals (Young/Daly's x 2^-4 ... 2^4, the configured one, auto) at the
/// best checkpoint interval, checkpoint intervals (Young/Daly's x 2^-4 ...
/// 2^4, the configured one) at the best snapshot interval, in rounds until
/// one changes nothing, then half an octave either side of the best; every
/// candidate on the same traces (same seeds), the best mean ETTR chosen.
ReliabilityPlan plan_reliability(const ReliabilityOptions& o, const RelaunchRules& rules);

/// The plan as a table: a `#` preamble (size, failure rate and its source,
/// costs, simulation), one row per cadence, and where a failure's time goes.
std::string format_reliability(const ReliabilityPlan& plan);
/// The plan as one JSON object (units in the field names).
std::string reliability_to_json(const ReliabilityPlan& plan);

}  // namespace ht::plan
