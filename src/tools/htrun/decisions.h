// htrun's decisions as pure functions: when the watch ends a launch itself (a
// host gone silent or cut off, an agent lost, a hang, a start that never
// ends), who is to blame once a launch has ended, which nodes to
// health-check, how long to wait before the next launch. Each takes what the
// supervisor saw (its agents' summaries of each node, the ranks' exit
// records, the launcher's report, the active nodes, options, times in
// seconds since the epoch) and returns values; the supervisor keeps the
// processes, connections, files and clocks (docs/htrun.md, "Who is to
// blame"; tests/resilience/htrun_decisions_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ht/resilience/run_protocol.h"
#include "htrun/cluster.h"
#include "htrun/launcher_event.h"
#include "htrun/rank_board.h"
#include "htrun/report.h"
#include "htrun/wire.h"

namespace htrun {

using ht::resilience::ExitRecord;
using ht::resilience::IncidentKind;

/// Where a launch's ranks run: rank r on active[r / slots], so a node's
/// ranks are consecutive.
struct Placement {
  std::vector<Node> active;
  int slots = 1;

  /// The index in `active` of the node that holds `rank`; -1 when none does.
  int node_of_rank(int rank) const;
  /// The index in `active` of the node on `host` (its name, or its name up
  /// to the first dot, as launchers shorten it); -1 when none is.
  int node_of_host(const std::string& host) const;
};

/// What the controller knows of one node of a launch: its agent's newest
/// summary of the launch's ranks there (rank_board.h) and its connection.
/// The rules below read these, one per node, never a rank's own record:
/// their work grows with hosts, not ranks.
struct HostView {
  wire::Summary summary;    // the newest of this launch (ranks 0 until one came)
  bool summarized = false;  // one of this launch came
  double heard_s = 0;       // when the agent last sent anything; 0: never
  double lost_s = 0;        // when its connection closed; 0: open
  /// Since its agent's connection closed: whether the host answers a probe
  /// of its daemon's port (a connection accepted); nullopt: not known yet.
  std::optional<bool> answers;

  double newest_beat_s() const { return double(summary.newest_beat_ms) / 1000; }
};
/// By index in Placement::active.
using Hosts = std::vector<HostView>;

/// One launch as the supervisor watched it: what the watch itself declared,
/// and what the agents and the launcher left when the launch ended.
struct Watch {
  /// What the watch saw and ended the job for (a hang, a preemption, a host
  /// gone silent, no heartbeat at all); nullopt when the job ended by itself.
  std::optional<IncidentKind> kind;
  std::string message;
  int failed_rank = -1;
  double failed_at = 0, detected_at = 0;
  int exit_code = 0;        // the launcher's (128 + signal when killed)
  /// The first rank that died without an exit record: its agent's report, or
  /// the launcher's ("exited on signal"), whichever came first (rank -1: none).
  LauncherEvent dead_rank;
  LauncherEvent lost_host;  // the launcher's report of a host lost (host "": none)
  Hosts hosts;              // the nodes' newest summaries
  std::vector<int> orphans;        // nodes (indices) whose ranks beat on after the launcher was gone
  std::vector<ExitRecord> exits;   // what the ranks said, oldest first
  std::int64_t checkpoint_step = 0;  // the newest committed checkpoint when the launch ended
  std::int64_t resume_step = 0;      // the checkpoint the launch resumed from
  std::int64_t reached = 0;          // the last step it completed, as far as anything tells
  /// The first step this launch was seen to complete (a summary or a step
  /// line), -1 when none: it trained.
  std::int64_t first_step = -1;
  double launched_at = 0;
  // What rank 0 recorded in metrics.jsonl during this launch: training began
  // (the run line: where it resumed, from which tier), and each step
  // completed, by step (exact times).
  bool training_began = false;
  std::int64_t resumed_from = -1;
  std::string resume_tier;
  std::map<std::int64_t, ht::resilience::StepLine> steps;
  double last_step_done_s = 0;  // when the newest of them completed
  /// When training slowed to a crawl, for a launch ended for a slow link (0:
  /// it did not): the steps completed after count as time lost.
  double degraded_from_s = 0;
};

/// What the watch declares when it ends a launch itself.
struct Finding {
  IncidentKind kind = IncidentKind::kHang;
  int rank = -1;
  double failed_at = 0;
  std::string message;
};

// ---------------------------------------------------- while a launch runs

/// The ranks' beat interval as the agents saw it: the shortest any reported
/// (0 when none knows yet).
double beat_interval_s(const Hosts& hosts);

/// How long a host's ranks must all be silent for it to be lost: ten beats,
/// at least 2 s (a busy host may write late; a false alarm costs a restart).
double host_silence_s(double beat_interval_s);
/// A host gone silent: every rank of a node stopped beating host_silence_s()
/// ago or longer, while its agent speaks on (heard within a quarter of
/// that: its ranks froze; an agent silent too is silent_agent's) and
/// another node's ranks beat within a quarter of that. The first such
/// node, its first rank blamed, failed at its newest beat. nullopt when
/// none is, or `beat_interval_s` is not known (<= 0).
std::optional<Finding> silent_host(const Hosts& hosts, const Placement& placement, double now_s,
                                   double beat_interval_s);

/// How long a node's agent may be away (its connection closed) while its
/// host still answers, before the node is lost: an agent reconnects after a
/// dropped connection well within this.
inline constexpr double kAgentReconnectS = 1.0;
/// A node whose agent's connection closed and did not come back: at once
/// when its host does not answer (down, or its daemon gone with it: a
/// crash), after kAgentReconnectS when it does (the agent alone died; its
/// ranks end themselves, unwatched). The first such node, its first rank
/// blamed, failed at its ranks' newest beat (the connection's end when none).
std::optional<Finding> agent_lost(const Hosts& hosts, const Placement& placement, double now_s);

/// A node cut off: its agent was heard before, then nothing for
/// `unreachable_after_s` while another node's agent was heard since (so the
/// fault is not htrun's own network, nor htrun stalled). The first such
/// node, its first rank blamed, failed at the last time it was heard.
/// nullopt when none is, or with fewer than two nodes.
std::optional<Finding> silent_agent(const Hosts& hosts, const Placement& placement, double now_s,
                                    double unreachable_after_s);

/// A rank that died with no exit record (its agent saw its socket close),
/// at `time_s` (the agent's clock).
struct Death {
  int rank = -1;
  double time_s = 0;
};
/// The death that is a crash: the first of `deaths` that came before any
/// rank recorded a failure of its own or of a peer (a non-zero exit record
/// in `exits`). A rank that dies after another recorded one is the launcher
/// ending the others (mpirun kills them when one exits non-zero): an
/// effect. rank -1 when none is.
LauncherEvent crash_among(const std::vector<Death>& deaths, const std::vector<ExitRecord>& exits);

/// How long the watch waits, after a rank's record of a communication
/// failure, for its peers' records before it ends the launch: ranks time out
/// on the same collective at about the same time, and ranks that name each
/// other (a link cut between them) must both be heard.
inline constexpr double kCommFailureSettleS = 1.0;
/// The time of the first record of a communication failure that names a
/// peer among `exits` (the ranks of a launch), nullopt when none does: its
/// writer is leaving, and its peers stay blocked in the collective while
/// the launcher may take long to end (a host cut off).
std::optional<double> comm_failure_recorded(const std::vector<ExitRecord>& exits);

/// A hang: a rank past start-up whose progress (its own, or a step any rank
/// completed, `last_step_done_s`) is older than `hang_timeout_s`. Peers go
/// on until they block on the hung rank, so the rank that got least far is
/// named (of each node's slowest), failed at its last progress. Only nodes
/// whose agent was heard within half the timeout count: a hang is ranks
/// that beat without progress, and an agent silent that long is the
/// silence rules' (silent_agent, agent_lost), its summary stale.
std::optional<Finding> hang(const Hosts& hosts, double now_s, double last_step_done_s, double hang_timeout_s);

/// The rank a start waits for: the first with no heartbeat (stuck before
/// MPI is up, and its peers with it), then the first whose MPI is not up
/// (kLaunch), then the first still starting (kStart); -1 when every rank
/// has started. A node with no summary has none of its ranks beating.
int start_laggard(const Hosts& hosts, const Placement& placement);
/// A start that did not end within the start timeout: a hang of `laggard`,
/// failed at the timeout; or, when no rank beat at all, a program that does
/// not keep the contract (kNoHeartbeat, named by `program`).
Finding start_not_finished(const Hosts& hosts, int laggard, double launched_at,
                           double start_timeout_s, const std::string& program);

// ---------------------------------------------------- gray failures

/// A launch's progress as the watch saw it in the agents' summaries: the
/// time and the furthest step completed, each time that grew.
using Progress = std::vector<std::pair<double, std::int64_t>>;
/// The launch's step time as it was before any slowdown: the least time per
/// step between two looks of its progress (seconds), once progress grew
/// kStepsForBaseline times; 0 before. The least, not the median: a crawl
/// that sets in early would otherwise become the baseline itself.
inline constexpr int kStepsForBaseline = 3;
double baseline_step_s(const Progress& progress);
/// Whether training has slowed to a crawl: no step completed for twenty
/// baseline steps, and at least `min_s`. A hang is the hang rule's, later;
/// this is the sign of a gray failure (a link or a host far slower than it
/// should be) that the link tests then look for. A pause of the job's own
/// (an evaluation, a save) may read so too: its link tests then find
/// nothing, and cost a few hundred KB a node.
bool steps_stalled(const Progress& progress, double now_s, double min_s = 2.0);

/// A link test of one node through its agent (LinkTest, LinkEchoes back):
/// the bytes, when they were asked for, and when the last arrived (0: not yet).
struct LinkTestRun {
  std::uint32_t request = 0;
  int node = -1;               // id
  int index = -1;              // in Placement::active; -1 for a spare (a reference only)
  std::int64_t bytes = 0;
  double sent_s = 0, done_s = 0;
};
/// How much slower than the median of the nodes tested a link must be to
/// fail: a tenth of it. (A link limited to 1 Mbit/s beside gigabit ones is
/// hundreds of times slower; the load of a shared machine, a few times.)
inline constexpr double kSlowLinkFactor = 10;
/// Whether the tests are all in, or out for `timeout_s`.
bool link_tests_settled(const std::vector<LinkTestRun>& runs, double now_s, double timeout_s);
/// Each node's bytes a second in its test (one not done yet at `now_s`
/// counts its time so far), by node id, and the median of them.
std::map<int, double> link_rates(const std::vector<LinkTestRun>& runs, double now_s, double* median);
/// The active node whose link is slow: its bytes over the time they took
/// (one not done yet counts its time so far: slower still) below the median
/// of every node tested over kSlowLinkFactor. Needs three nodes tested (the
/// median of two says nothing of which is slow). Kind kStraggler, its
/// first rank blamed, failed when the test was sent. nullopt when none is.
std::optional<Finding> slow_link(const std::vector<LinkTestRun>& runs, const Placement& placement, double now_s);

// ---------------------------------------------------- once it has ended

/// When the ranks of active[node] last beat (`otherwise` when none did, or
/// node < 0): the failure came after, to within a heartbeat interval.
double last_beat(const Hosts& hosts, int node, double otherwise);
/// The index of the node whose heartbeats stopped a second or more before
/// every other node's, or -1 (fewer than two nodes beat, or none did so).
int stale_node(const Hosts& hosts);

/// Who is to blame for the end of launch `w`, most direct first: the watch
/// itself; a rank's own exit record of its failure; the launcher's report
/// of a rank killed or a host lost (a lost host reported before a rank
/// killed elsewhere is the cause); ranks that outlived the launcher; the
/// ranks communication failures name (a named rank that still beats without
/// progress for half the ranks' `comm_timeout_s` hangs; ranks naming each
/// other make both nodes suspects); the node whose heartbeats stopped first;
/// else an unexplained failure (its message points at `job_log`). Fills
/// the rank, node and host, the suspects (node ids), the failure time (see
/// docs/htrun.md), the detection latency and the steps reached and lost.
Incident classify(const Watch& w, const Placement& placement, double comm_timeout_s, const std::string& job_log);

/// The verdict of a preempted launch: whether its save left a newer
/// checkpoint than it started from.
std::string preemption_verdict(const Watch& w);
/// A launch that failed before any training with nothing said (no exit
/// record, no launcher report, not killed by a signal): a usage error or a
/// missing file, which fails again the same way.
bool failed_before_training(const Watch& w);

// ---------------------------------------------------- before the next

/// The nodes to health-check after `incident`, in `active`'s order: the
/// node at fault; every node when none is known (or only the suspects, when
/// there are some) and after a corruption (any replica may lie); none after
/// a divergence (the loss is summed over every rank: the numerics, not a node).
std::vector<Node> nodes_to_check(const Incident& incident, const std::vector<Node>& active);
/// Whether the node at fault is cordoned even when its check passes: a
/// named straggler (the job asked for it).
bool cordon_even_if_healthy(const Incident& incident);

/// Whether the node at fault is cordoned without a health check while a
/// spare is ready to take its place: a host lost (the launcher's report,
/// its heartbeats, its ranks cut off from the launcher), whose check could
/// only wait out the connect timeout, and a named straggler (a slow link),
/// cordoned whatever its check says. `--readmit-after` checks them later.
/// Without a spare a lost host's check runs: one that passes keeps the job
/// going.
bool cordon_unchecked(const Incident& incident, bool spare_ready);
/// A node htrun took out of the job.
struct Cordoned {
  Node node;
  double at = 0;  // when
  /// The earliest time for the watch's next readmission check after one
  /// failed (0: none failed). An incident checks a node due whatever this
  /// says: the job needs a spare then, and a check made while training
  /// shared the machine may have failed for that.
  double retry_at = 0;
};
/// The cordoned nodes to health-check again, so that those that pass
/// return as spares: each cordoned `readmit_after_s` ago or longer, in id
/// order; none when `readmit_after_s` < 0 (never readmit).
std::vector<Node> nodes_to_readmit(const std::vector<Cordoned>& cordoned, double now_s, double readmit_after_s);

/// Launches in a row that failed without training past their checkpoint,
/// counting the one that just ended (`reached` from `resume_step`): 0 after
/// one that made progress.
int failures_in_a_row(int before, std::int64_t reached, std::int64_t resume_step);
inline constexpr double kMaxBackoffS = 30;
/// The wait before the next launch, from the detection: none after progress,
/// then `base_s`, doubling with each failure in a row, at most kMaxBackoffS.
double backoff_s(int failures_in_a_row, double base_s);

/// The summaries a second one controller takes at most when the interval is
/// its own choice: about a tenth of a core (docs/benchmarks.md, "The
/// control plane at scale").
inline constexpr double kSummariesPerSecond = 8192;
/// The agents' summary interval (ms) for `hosts` hosts when none is given:
/// 500 ms, longer beyond 4,096 hosts so that the controller takes at most
/// kSummariesPerSecond, but never past a third of `unreachable_after_s` (a
/// host silent that long is taken for cut off).
int auto_summary_interval_ms(std::size_t hosts, double unreachable_after_s);

}  // namespace htrun
