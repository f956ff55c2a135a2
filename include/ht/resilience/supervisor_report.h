// The supervisor's report, <run-dir>/htrun_report.json: what htrun writes at
// the end of a run and what ht-report and `ht-plan --reliability
// --from-report` read — the verdict, every incident (kind, rank and node,
// detection latency, recovery time, steps lost, where the relaunch resumed),
// the nodes cordoned and readmitted, every launch, and goodput. Part of the
// run protocol (ht/resilience/run_protocol.h): one writer, one reader, and
// docs/htrun.md ("The report") is the same contract in prose.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ht/resilience/run_protocol.h"

namespace ht::resilience {

/// A node's health check after an incident.
struct NodeHealth {
  int node = -1;
  std::string host;
  bool healthy = false;
  bool checked = true;  // false: cordoned unchecked (a host lost, a spare ready)
};

struct Incident {
  /// What ended the launch (docs/htrun.md, "Who is to blame"); its name is
  /// the report's "kind".
  IncidentKind kind = IncidentKind::kFailure;
  int rank = -1;  // the rank at fault, -1 when unknown
  int node = -1;  // its node id
  std::string host;
  /// Node ids to health-check when no one node is named (ranks that named
  /// each other: a link cut between them).
  std::vector<int> suspect_nodes;
  int exit_code = 0;
  std::string message;  // what the rank said, if it said anything
  double time_s = 0;    // since htrun started ("time")
  double detected_at = 0;
  /// When it failed, as well as it is known: the culprit's last heartbeat,
  /// its exit record, or the launcher's line (detected_at when nothing tells).
  double failed_at = 0;
  double detection_latency_s = 0;
  std::optional<double> recovery_s;  // detected -> the first step completed after it (its completion time)
  std::int64_t step_reached = 0;
  std::int64_t steps_lost = 0;  // steps done since the checkpoint resumed from
  /// Where the relaunch after it resumed: the step and the tier ("memory",
  /// "memory+peer": some ranks pulled their copy from a peer, "disk";
  /// "" when no relaunch trained).
  std::int64_t resumed_from = -1;
  std::string resume_tier;
  std::vector<NodeHealth> health;  // the suspects' checks, in the order run
};

/// A node's ranks' time blocked waiting for communication during one
/// launch (their mean, as its agent's last summary said).
struct NodeCommWait {
  int node = -1;
  double comm_wait_s = 0;
};

/// One launch: when it started, how long its agents took to acknowledge it
/// (their ranks of older launches ended), and how long each node's ranks
/// waited for communication in it.
struct LaunchRecord {
  int launch = 0;
  std::int64_t epoch = 0;
  double started_at = 0;
  double ack_s = 0;                 // the Launch sent to the last acknowledgement
  std::vector<int> unacknowledged;  // node ids whose agents did not acknowledge in time
  std::vector<NodeCommWait> comm_wait;  // the launch's nodes, in placement order
};

struct SupervisorReport {
  std::string verdict;
  int exit_code = 1;
  // productive_s: the steps' own times, each step once (its last completion)
  double wall_s = 0, productive_s = 0;
  int restarts = 0;
  std::vector<Incident> incidents;
  std::vector<int> cordoned, active, spares_left;
  std::vector<int> readmitted;  // cordoned nodes that passed a later check and returned as spares, in order
  std::vector<LaunchRecord> launches;
  /// The node agents' frames: taken, and dropped by why (forged, replayed,
  /// malformed, out of place), with connections that never proved themselves.
  std::int64_t agent_frames = 0, agent_frames_dropped = 0, agent_handshake_timeouts = 0;

  double goodput() const { return wall_s > 0 ? productive_s / wall_s : 0.0; }
};

/// The report as JSON (indented, one field a line), with "goodput" beside
/// the figures it comes from.
std::string format_supervisor_report(const SupervisorReport& report);
/// Reads a report. Throws ProtocolError when `text` is not a JSON object, a
/// field holds another type than the protocol's (the message names it), an
/// incident's kind is not one the protocol names, or one of "verdict",
/// "wall_s", "productive_s" and "incidents" is missing (a file that is not a
/// report). Other missing fields read as their defaults: reports of older
/// versions lack "launches" and the agents' counts.
SupervisorReport parse_supervisor_report(std::string_view text);
/// The report at `path` (<run-dir>/htrun_report.json): ht::IoError (kIo)
/// when it cannot be read, ProtocolError as parse_supervisor_report.
SupervisorReport read_supervisor_report(const std::string& path);

}  // namespace ht::resilience
