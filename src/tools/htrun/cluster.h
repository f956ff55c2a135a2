// The nodes htrun may run a job on, and how to reach them. Three sources:
//  - local:    N simulated nodes on this machine (a node is a group of
//              ranks the supervisor can declare bad); launched with mpirun;
//  - hostfile: machines from an Open MPI hostfile ("host slots=N"), in
//              file order; launched with mpirun --host;
//  - Slurm:    the nodes of the allocation (SLURM_JOB_ID set), in Slurm's
//              order; launched with srun, bad nodes drained with scontrol.
// Spares are the last nodes of the list. A node's id is its position in
// the list: the label HT_FAULTS (node-unhealthy:node=N) and ht-health
// --node use. Ranks fill the nodes in order, `slots` per node.
#pragma once

#include <string>
#include <vector>

#include "htrun/launcher_event.h"

namespace htrun {

enum class ClusterKind { kLocal, kHostfile, kSlurm };

/// The tasks per node of a Slurm allocation from SLURM_TASKS_PER_NODE's value
/// ("2(x3)", "2,2(x2)": counts, each with an optional repeat). Throws
/// std::runtime_error ("htrun: ...") when the text is not of that form, a
/// count is not in [1, 1000000], or the nodes have different counts (htrun
/// needs the same count on every node).
int slurm_tasks_per_node(const std::string& text);

struct Node {
  int id = 0;
  std::string host;  // empty for a simulated local node
};

/// How htrun names a node in messages: "node 2", or "node 2 (h2)" with a host.
std::string node_name(const Node& node);

class Cluster {
 public:
  static Cluster local(int nodes);
  /// A cluster of `kind` with no nodes: for reading its launcher's output (tests).
  static Cluster of_kind(ClusterKind kind);
  /// Reads an Open MPI hostfile; `slots` receives the slots per host (the
  /// same for every host, or the file is refused).
  static Cluster from_hostfile(const std::string& path, int* slots);
  /// The current Slurm allocation; `slots` receives its tasks per node
  /// (SLURM_TASKS_PER_NODE; different counts on different nodes are refused).
  static Cluster from_slurm(int* slots);

  ClusterKind kind() const { return kind_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::string name(const Node& node) const;
  std::string describe() const;

  /// The launcher command that runs `program` with `slots` ranks on each of
  /// `active` (in order: rank r is on active[r / slots]), with
  /// `launcher_args` passed to mpirun/srun. `env` ("NAME=value") is what
  /// the launch sets for its ranks in the launcher's environment (the
  /// launch epoch, the communication timeout). With a hostfile, those and
  /// the HT_*, OMP_*, OPENBLAS_*, NCCL_* and CUDA_VISIBLE_DEVICES variables
  /// set here are exported to the ranks by name (mpirun -x); srun exports
  /// the whole environment itself.
  std::vector<std::string> job_command(const std::vector<Node>& active, int slots,
                                       const std::vector<std::string>& program,
                                       const std::vector<std::string>& launcher_args,
                                       const std::vector<std::string>& env = {}) const;
  /// Environment the job needs ("NAME=value").
  std::vector<std::string> job_env() const;
  /// `command` run once on `node` (health checks), through the same
  /// launcher, environment and `launcher_args` as the job; reaching a host
  /// takes at most `connect_timeout_s` (ssh's ConnectTimeout, for mpirun;
  /// srun's own for Slurm).
  std::vector<std::string> on_node(const Node& node, const std::vector<std::string>& command,
                                   const std::vector<std::string>& launcher_args,
                                   double connect_timeout_s = 10) const;
  /// `command` run once on every one of `nodes` by a single launch (the
  /// node agents): one srun step, or one mpirun whose daemons fan out over
  /// ssh, with standard input given to every task. The tasks follow the
  /// order of `nodes` (task i, OMPI_COMM_WORLD_RANK or SLURM_PROCID, on
  /// nodes[i] under mpirun; under Slurm in Slurm's own order, so a task
  /// finds its node by SLURMD_NODENAME). Empty for simulated nodes, each
  /// its own process here.
  std::vector<std::string> on_nodes(const std::vector<Node>& nodes, const std::vector<std::string>& command,
                                    const std::vector<std::string>& launcher_args,
                                    double connect_timeout_s = 10) const;
  /// Takes `node` out of the cluster's own scheduling (Slurm: drain it).
  /// Returns "" or what went wrong (a warning: htrun stops using the node
  /// either way).
  std::string cordon(const Node& node, const std::string& reason) const;
  /// What a line of the launcher's output says of a failure: a rank killed
  /// by a signal (mpirun's "process rank R ... exited on signal", srun's
  /// "task R: Killed"), or a host lost (Open MPI's "Peer host: H" after a
  /// peer disconnected and "Remote daemon: ... on node H", ssh's
  /// "Connection to H closed by remote host", "Timeout, server H not
  /// responding" and "connect to host H ...: ...", srun's "Node failure on
  /// H"); nothing otherwise (time_s is the caller's).
  LauncherEvent launcher_event(const std::string& line) const;

  /// The port the reachability watch probes on each host: ssh's (22) for a
  /// hostfile (mpirun reaches hosts by ssh), slurmd's (6818, Slurm's
  /// default SlurmdPort) under Slurm; 0 for simulated nodes (none).
  int probe_port() const;

  void set_mpirun(std::string mpirun) { mpirun_ = std::move(mpirun); }

 private:
  ClusterKind kind_ = ClusterKind::kLocal;
  std::vector<Node> nodes_;
  std::string mpirun_ = "mpirun";
};

}  // namespace htrun
