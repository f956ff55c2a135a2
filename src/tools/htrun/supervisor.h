// htrun's supervisor: starts a node agent on every host, launches the job,
// watches it through the agents' summaries, classifies a failure, checks and
// replaces nodes through the agents, relaunches with resume; bounded
// restarts with back-off.
//
// A launch goes through the states of LaunchState; what ends it is decided
// by an ordered table of detectors (supervisor.cc, kDetectors), each a rule
// of decisions.h over one summary per node.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "htrun/cluster.h"
#include "htrun/controller.h"
#include "htrun/decisions.h"
#include "htrun/host_probe.h"
#include "htrun/report.h"
#include "htrun/spawner.h"

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
  /// The port htrun probes on a host whose agent's connection closed, to
  /// tell a host down from an agent gone: < 0 the cluster's (ssh's 22 for a
  /// hostfile, slurmd's 6818 under Slurm), 0 none.
  int probe_port = -1;
  /// Seconds a node's agent that spoke before may stay silent, while the
  /// others speak, before its host is taken for cut off and the launch ends.
  double unreachable_after_s = 3;
  std::vector<std::string> health_args;    // more arguments for ht-health (its thresholds)
  std::string health_tool;                 // ht-health
  std::string agent_tool;                  // ht-agent
  /// The ranks' socket directory on every host (HT_AGENT_DIR); "": one
  /// made up per run under /tmp.
  std::string agent_dir;
  /// Where agents reach htrun ("": 127.0.0.1 for simulated nodes, else this
  /// host's name) and the port htrun listens on (0: any free one).
  std::string controller_address;
  int controller_port = 0;
  /// How often each agent sends its summary (ms); 0: htrun's choice for
  /// the cluster's size (auto_summary_interval_ms).
  int summary_interval_ms = 0;
  /// Seconds an agent has to connect after it was started.
  double agent_timeout_s = 30;
  /// Seconds the agents have to acknowledge a launch (their ranks of older
  /// launches ended) before the job starts without those that did not.
  double ack_timeout_s = 5;
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
/// of their own; the processes it runs keep the wall clock for their own
/// deadlines and for the times of the launcher's lines.
struct Clock {
  std::function<double()> now = now_s;
  std::function<void(double seconds)> sleep;  // empty: sleep for real (turning the controller's loop)
};

/// Link tests (a gray failure): the bytes each node's agent sends back
/// (256 KB: 2 s on a 1 Mbit/s link, milliseconds on a healthy one), how long
/// they may take, and how soon after one round another may start.
inline constexpr std::int32_t kLinkTestBytes = 256 * 1024;
inline constexpr double kLinkTestTimeoutS = 5;
inline constexpr double kLinkRetestS = 30;

/// Where a launch is: starting (the start timeout applies; a node's silence
/// does not), training, or ended (by itself or by a detector).
enum class LaunchState { kStarting, kTraining, kEnded };

class Supervisor {
 public:
  /// `spawner`: how processes are started (nullptr: real ones).
  Supervisor(SupervisorOptions options, Cluster cluster, Clock clock = {}, std::shared_ptr<Spawner> spawner = nullptr);
  ~Supervisor();
  /// Runs the job to its end (or until it cannot go on) and returns the report.
  Report run();
  /// What run() would start first (the agents, the node set and commands), for --dry-run.
  std::string plan() const;
  /// The controller's counts (frames, drops by kind); after run().
  const ControllerCounts& counts() const;

 private:
  struct WatchState;  // supervisor.cc

  // --- launches (supervisor.cc)
  std::vector<std::string> job_command(const std::vector<std::string>& env = {}) const;
  /// Launches the job on the active nodes under a new epoch and watches it
  /// to its end: what happened, as the watch saw it.
  Watch launch_and_watch(int launch, std::int64_t resume_step, Report& report);
  std::unique_ptr<Process> start_launch(int launch, std::int64_t resume_step, Report& report);
  /// One look at a running launch; true when the watch ends.
  bool poll_launch(Process& job, WatchState& s);
  /// Asks the detectors of kDetectors in order; true when one ended the launch.
  bool run_detectors(Process& job, WatchState& s, double t);
  /// The launch's exit records and deaths the agents sent.
  void take_launch_events(WatchState& s);
  /// Each node's view from its agent; the code the ranks' records give once every one ended.
  void update_hosts(WatchState& s, double t);
  void pass_on_preemption(Process& job, WatchState& s);

  // --- the detectors (supervisor.cc): each a rule of decisions.h, or the
  // launcher's and the agents' own reports
  struct Detected;
  std::optional<Detected> job_ended(Process& job, WatchState& s, double t);
  std::optional<Detected> rank_died_or_host_lost(Process& job, WatchState& s, double t);
  std::optional<Detected> node_agent_lost(Process& job, WatchState& s, double t);
  std::optional<Detected> node_silent(Process& job, WatchState& s, double t);
  std::optional<Detected> node_cut_off(Process& job, WatchState& s, double t);
  std::optional<Detected> link_slow(Process& job, WatchState& s, double t);
  std::optional<Detected> progress_stalled(Process& job, WatchState& s, double t);
  std::optional<Detected> start_unfinished(Process& job, WatchState& s, double t);
  std::optional<Detected> peer_named(Process& job, WatchState& s, double t);
  struct Detector {
    const char* name;
    bool while_starting, while_training;  // the launch states it applies in
    std::optional<Detected> (Supervisor::*find)(Process& job, WatchState& s, double t);
  };
  static const Detector kDetectors[];
  /// After the launch ended: the records, checkpoints and launcher reports that tell what it reached.
  void conclude_watch(Process& job, WatchState& s);
  void record_launch(const Watch& w, Report& report, std::optional<Incident>& pending,
                     std::map<std::int64_t, ht::resilience::StepLine>& completed);
  Incident classify_launch(const Watch& w, double wall_start) const;
  std::optional<std::pair<int, std::string>> not_retried(const Incident& incident, const Watch& w,
                                                         int& last_early_failure_code) const;
  bool wait_to_relaunch(const Incident& incident, const Watch& w, std::int64_t resume_step, int& failures_in_a_row);
  void finish_report(Report& report, double wall_start,
                     const std::map<std::int64_t, ht::resilience::StepLine>& completed);
  Placement placement() const { return {active_, options_.slots}; }
  double now() const { return clock_.now(); }
  /// Waits `seconds`, turning the controller's loop meanwhile, and routes
  /// what the agents said (health results, acknowledgements, the launch's events).
  void wait(double seconds);
  std::string memory_dir() const;
  double comm_timeout_s() const;
  /// The agents' summary interval: given, or for the cluster's size.
  int summary_interval_ms() const;
  std::string node_name(int id) const;

  // --- nodes and their agents (supervisor_nodes.cc)
  /// The command that runs node `node`'s agent there.
  std::vector<std::string> agent_command(const Node& node) const;
  /// The command that runs the agents of all `nodes` by one launch (empty
  /// where each runs alone: simulated nodes, or one node).
  std::vector<std::string> agents_command(const std::vector<Node>& nodes) const;
  /// Starts the agents of `nodes` by one launch where the cluster has one,
  /// else each alone (ensure_agent).
  void start_agents(const std::vector<Node>& nodes);
  /// Starts the agent of `node` unless it is connected or one started
  /// within the agent timeout is still on its way.
  void ensure_agent(const Node& node);
  /// Starts and waits (at most the agent timeout) for the agents of `nodes`;
  /// the nodes whose agent never connected.
  std::vector<Node> wait_for_agents(const std::vector<Node>& nodes);
  /// Sends `make(node)` to every connected agent of `nodes` and of `told`,
  /// and waits up to ack_timeout_s for the acknowledgements of `nodes`':
  /// the seconds the last took (the nodes that did not acknowledge in
  /// `missing`). `told`'s are not waited for (spares: one cut off must not
  /// hold up the job).
  double command_all(const std::vector<Node>& nodes, const std::vector<Node>& told,
                     const std::function<wire::Message(const Node&, std::uint32_t)>& make, std::vector<int>* missing);
  /// Every node htrun knows, active, spare and cordoned.
  std::vector<Node> all_nodes() const;
  /// Before a launch: every active node's agent connected; a node whose
  /// agent does not connect within the agent timeout is cordoned and
  /// replaced by a spare. False (the verdict said) when none is left.
  bool agents_ready(Report& report);
  /// Health-checks the suspect nodes of `incident`, cordons the bad ones and
  /// brings in spares (or shrinks). False when the job cannot go on.
  bool replace_bad_nodes(Incident& incident, Report& report);
  Cordoned* cordoned(int id);
  void readmit(const Node& node);
  /// While a launch runs: starts the health check of each cordoned node due
  /// for readmission (through its agent, started again if need be), and
  /// readmits those whose check passed.
  void poll_readmissions();
  /// The health check of `node` through its agent; the request's number (0:
  /// its agent is not connected).
  std::uint32_t request_health(const Node& node);
  /// ht-health on each of `nodes`, all at once through their agents; whether each passed.
  std::vector<bool> nodes_healthy(const std::vector<Node>& nodes);
  /// Starts a link test of every connected node of `nodes` (LinkTest, the
  /// echoes timed on arrival); `index_of` gives a node's index in the
  /// launch's placement, -1 for a reference node.
  std::vector<LinkTestRun> start_link_tests(const std::vector<Node>& nodes, const std::function<int(int)>& index_of);
  /// Fills in the tests whose last echo arrived.
  void take_link_echoes(std::vector<LinkTestRun>& runs);
  /// Writes the output of node `node`'s check to <run-dir>/health_node<N>.txt.
  void log_health(int node, const wire::HealthResult& result) const;
  /// The end of the run: Bye to every agent, their processes ended.
  void stop_agents();

  SupervisorOptions options_;
  Cluster cluster_;
  Clock clock_;
  std::shared_ptr<Spawner> spawner_;
  wire::Secret secret_;
  std::unique_ptr<Controller> controller_;
  std::vector<Node> active_, spares_;
  std::vector<Cordoned> cordoned_;
  std::map<int, std::unique_ptr<Process>> agent_processes_;  // by node id
  /// The one launch of every node's agent at the start, and the nodes whose
  /// agent it still stands for (a node's own start takes over from it).
  std::unique_ptr<Process> agent_group_;
  std::set<int> agent_group_nodes_;
  std::map<int, double> agent_started_s_;                     // by node id
  /// Readmission checks running while the job runs: node id -> (request, when it started).
  std::map<int, std::pair<std::uint32_t, double>> readmit_checks_;
  std::vector<int> readmitted_;  // node ids, in the order they came back
  // What the agents said, routed by wait(): health results and
  // acknowledgements by request, and the current launch's events.
  std::map<std::uint32_t, wire::HealthResult> health_results_;
  std::map<std::uint32_t, std::set<int>> acks_;
  std::map<std::uint32_t, double> link_done_;  // link test request -> when its last echo arrived
  std::vector<AgentEvent> launch_events_;
  std::int64_t epoch_ = 0;  // the current launch's (HT_LAUNCH_EPOCH)
  /// HT_MFU_PEAK and its source, once a launch has measured the peak.
  std::vector<std::string> mfu_peak_env_;
};

}  // namespace htrun
