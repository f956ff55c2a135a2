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
  /// Health-checks the suspect nodes of `incident`, cordons the bad ones and
  /// brings in spares (or shrinks). False when the job cannot go on.
  bool replace_bad_nodes(Incident& incident, Report& report);
  bool node_healthy(const Node& node);
  std::string node_name(int id) const;
  std::string preemption_verdict(const Watch& w) const;
  /// The memory tiers' directory of the program's checkpoints (the default
  /// one under <run-dir>/checkpoints).
  std::string memory_dir() const;

  SupervisorOptions options_;
  Cluster cluster_;
  std::vector<Node> active_, spares_, cordoned_;
};

}  // namespace htrun
