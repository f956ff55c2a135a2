// htrun's supervisor loop: launch, watch, classify a failure, check and
// replace nodes, relaunch with resume; bounded restarts with back-off.
#pragma once

#include <string>
#include <vector>

#include "htrun/cluster.h"
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
  std::string health_tool;                 // ht-health
  std::vector<std::string> launcher_args;  // passed to mpirun / srun
  std::vector<std::string> program;        // the job: program [args]
};

class Supervisor {
 public:
  Supervisor(SupervisorOptions options, Cluster cluster);
  /// Runs the job to its end (or until it cannot go on) and returns the report.
  Report run();
  /// What run() would launch first (the node set and commands), for --dry-run.
  std::string plan() const;

 private:
  struct Watch;  // one launch as it was watched
  std::vector<std::string> job_command() const;
  Watch launch_and_watch(int launch, std::int64_t resume_step);
  Incident classify(const Watch& w);
  /// The index in active_ of the node that holds `rank`, or of `host`; -1 when none.
  int node_of_rank(int rank) const;
  int node_of_host(const std::string& host) const;
  /// When the ranks of active_[node] last beat (`otherwise` when none did).
  double last_beat(const Watch& w, int node, double otherwise) const;
  /// The index of the node whose heartbeats stopped well before the others', or -1.
  int stale_node(const Watch& w) const;
  /// Health-checks the suspect nodes of `incident`, cordons the bad ones and
  /// brings in spares (or shrinks). False when the job cannot go on.
  bool replace_bad_nodes(Incident& incident, Report& report);
  /// ht-health on each of `nodes`, all at once; whether each passed.
  std::vector<bool> nodes_healthy(const std::vector<Node>& nodes);
  std::string node_name(int id) const;
  std::string preemption_verdict(const Watch& w) const;
  /// The memory tiers' directory of the program's checkpoints (the default
  /// one under <run-dir>/checkpoints).
  std::string memory_dir() const;
  /// The ranks' communication timeout htrun sets (HT_COMM_TIMEOUT) when the
  /// user did not: two thirds of the hang timeout.
  double comm_timeout_s() const;

  SupervisorOptions options_;
  Cluster cluster_;
  std::vector<Node> active_, spares_, cordoned_;
  std::int64_t epoch_ = 0;  // the current launch's (HT_LAUNCH_EPOCH)
};

}  // namespace htrun
