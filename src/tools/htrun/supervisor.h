// htrun's supervisor loop: launch, watch, classify a failure, check and
// replace nodes, relaunch with resume; bounded restarts with back-off.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "htrun/cluster.h"
#include "htrun/decisions.h"
#include "htrun/host_probe.h"
#include "htrun/child_process.h"
#include "htrun/report.h"

namespace htrun {

struct SupervisorOptions {
  int slots = 1;        // ranks per node
  int spares = 0;       // the last `spares` nodes of the cluster
  std::string run_dir = "runs/htrun";
  int max_restarts = 5;
  double backoff_s = 1, hang_timeout_s = 60, grace_s = 5, health_timeout_s = 120;
  /// Seconds a health check may take to reach a host (ssh's ConnectTimeout).
  double connect_timeout_s = 10;
  double start_timeout_s = 900;  // launch to every rank's first heartbeat past "start"; 0: none
  bool allow_shrink = false, health = true;
  /// Seconds after which a cordoned node is health-checked again (at the
  /// next incident) and, when it passes, returns as a spare; < 0: never.
  double readmit_after_s = -1;
  /// The port htrun's reachability watch probes on each host of a launch
  /// (HostProbe): < 0 the cluster's (ssh's 22 for a hostfile, slurmd's 6818
  /// under Slurm), 0 no watch.
  int probe_port = -1;
  /// Seconds a host that answered before may stay silent, while the others
  /// answer, before it is declared cut off and the launch ends.
  double unreachable_after_s = 3;
  std::vector<std::string> health_args;    // more arguments for ht-health (its thresholds)
  std::string health_tool;                 // ht-health
  std::vector<std::string> launcher_args;  // passed to mpirun / srun
  std::vector<std::string> program;        // the job: program [args]
};

/// htrun's own exit status (docs/htrun.md): the program's codes where they
/// mean the same.
enum SupervisorExit : int {
  kSupervisorFinished = ht::resilience::kExitOk,
  kSupervisorGaveUp = 1,  // out of restarts, or a bad node and no spare
  kSupervisorNotRetried = ht::resilience::kExitError,  // the program's input, or a program that cannot be watched
  kSupervisorPreempted = ht::resilience::kExitPreempted,  // stopped by a signal; the checkpoint saved
};

/// The supervisor's time: the wall clock in seconds since the Unix epoch
/// (the ranks' records use it), and a way to wait on it. Tests give a clock
/// of their own; the processes it runs (ChildProcess) keep the wall clock for their
/// own deadlines and for the times of the launcher's lines.
struct Clock {
  std::function<double()> now = now_s;
  std::function<void(double seconds)> sleep;  // empty: sleep for real
};

class Supervisor {
 public:
  Supervisor(SupervisorOptions options, Cluster cluster, Clock clock = {});
  /// Runs the job to its end (or until it cannot go on) and returns the report.
  Report run();
  /// What run() would launch first (the node set and commands), for --dry-run.
  std::string plan() const;

 private:
  std::vector<std::string> job_command(const std::vector<std::string>& env = {}) const;
  /// Launches the job on the active nodes under a new epoch and watches it
  /// to its end: what happened, as the watch saw it.
  Watch launch_and_watch(int launch, std::int64_t resume_step);
  struct WatchState;  // supervisor.cc
  /// What a finished launch adds to the report: the last incident (with
  /// where the relaunch resumed), recoveries, the steps completed.
  void record_launch(const Watch& w, Report& report, std::optional<Incident>& pending,
                     std::map<std::int64_t, ht::resilience::StepLine>& completed);
  /// The incident of a failed launch, said on stderr.
  Incident classify_launch(const Watch& w, double wall_start) const;
  /// The exit code and verdict when relaunching cannot help (a preemption,
  /// bad input, no heartbeat, the same early failure twice); none otherwise.
  std::optional<std::pair<int, std::string>> not_retried(const Incident& incident, const Watch& w,
                                                         int& last_early_failure_code) const;
  /// Waits out the back-off before a relaunch; false when a signal to stop came.
  bool wait_to_relaunch(const Incident& incident, const Watch& w, std::int64_t resume_step, int& failures_in_a_row);
  /// The report's totals and nodes, written to htrun_report.json.
  void finish_report(Report& report, double wall_start,
                     const std::map<std::int64_t, ht::resilience::StepLine>& completed);
  std::unique_ptr<ChildProcess> start_launch(int launch, std::int64_t resume_step);
  /// The reachability watch of the active hosts, or none (simulated nodes,
  /// one node, --probe-port 0).
  std::unique_ptr<HostProbe> start_probe() const;
  /// One look at a running launch; true when the watch ends (the job ended or was stopped).
  bool poll_launch(ChildProcess& job, WatchState& s);
  /// Whether every rank started; a start past the start timeout is declared.
  void check_start(const std::map<int, ht::resilience::Heartbeat>& beats, WatchState& s, double t);
  /// Passes a signal to stop on to the ranks and waits for the job to end.
  void pass_on_preemption(ChildProcess& job, const std::map<int, ht::resilience::Heartbeat>& beats, Watch& w);
  /// After the launch ended: the records, checkpoints and launcher reports that tell what it reached.
  void conclude_watch(ChildProcess& job, WatchState& s);
  Placement placement() const { return {active_, options_.slots}; }
  double now() const { return clock_.now(); }
  void sleep(double seconds) const;
  /// Health-checks the suspect nodes of `incident`, cordons the bad ones and
  /// brings in spares (or shrinks). False when the job cannot go on.
  bool replace_bad_nodes(Incident& incident, Report& report);
  /// The record of node `id` while it is cordoned; nullptr otherwise.
  Cordoned* cordoned(int id);
  /// Returns `node`, whose check passed, to the spares, once the ranks of
  /// earlier launches left on it are ended.
  void readmit(const Node& node);
  /// While a launch runs: starts the health check of each cordoned node due
  /// for readmission, and readmits those whose check passed (one that
  /// failed is looked at again after another --readmit-after, and at the
  /// next incident).
  void poll_readmissions();
  std::unique_ptr<ChildProcess> start_health_check(const Node& node) const;
  /// Kills what is left on `node` of the ranks earlier launches ran there
  /// (a host cut off keeps its processes): each pid its heartbeats gave that
  /// still runs this run directory's program.
  void end_old_ranks(const Node& node);
  /// ht-health on each of `nodes`, all at once; whether each passed.
  std::vector<bool> nodes_healthy(const std::vector<Node>& nodes);
  std::string node_name(int id) const;
  /// The memory tiers' directory of the program's checkpoints (the default
  /// one under <run-dir>/checkpoints).
  std::string memory_dir() const;
  /// The ranks' communication timeout htrun sets (HT_COMM_TIMEOUT) when the
  /// user did not: two thirds of the hang timeout.
  double comm_timeout_s() const;

  SupervisorOptions options_;
  Cluster cluster_;
  Clock clock_;
  std::vector<Node> active_, spares_;
  std::vector<Cordoned> cordoned_;
  /// Readmission checks running while the job runs: node id -> the check, when it started.
  std::map<int, std::pair<std::unique_ptr<ChildProcess>, double>> readmit_checks_;
  std::vector<int> readmitted_;  // node ids, in the order they came back
  /// The pids of the ranks every launch ran, by host (from their heartbeats).
  std::map<std::string, std::set<int>> rank_pids_;
  std::int64_t epoch_ = 0;  // the current launch's (HT_LAUNCH_EPOCH)
};

}  // namespace htrun
