// ht::resilience::RankGuard: the part of resilience that lives inside each
// rank — heartbeats, a watchdog, distinctive exit codes, preemption signals.
//
// Heartbeat: a thread rewrites <run_dir>/heartbeat/rank_R.json (rank, host,
// pid, step, phase, time) every heartbeat interval, atomically, so the
// supervisor can tell a live rank from a silent one. The records, phases and
// exit codes are the run protocol's (ht/resilience/run_protocol.h).
// Watchdog: once training has begun (step 1 on), if the step/phase has not
// changed for `watchdog` seconds the rank writes a diagnostic (step, phase,
// how long) and exits with kHang. Start-up is left to the supervisor (htrun
// --start-timeout).
// Preemption: SIGTERM or SIGUSR1 sets a flag; the training loop finishes the
// step, saves a checkpoint and exits with kPreempted.
// Every deliberate exit writes <run_dir>/exit/rank_R.json (code, kind,
// step, message, blamed ranks) first, so the supervisor can classify the failure.
// Node agent: under htrun (HT_AGENT_DIR set) the heartbeats and the exit
// record go to the host's node agent over a Unix socket instead of the run
// directory, and the agent fences the rank when a newer launch supersedes it
// (run_protocol.h, "the node agent's channel"); a rank whose agent is gone
// can no longer be watched, and exits with kExitFenced. Without an agent
// the records are files in the run directory, as below.
// Epochs: a supervisor numbers its launches (HT_LAUNCH_EPOCH, and the file
// <run_dir>/launch_epoch it writes before each launch). Heartbeats and exit
// records carry the epoch, and a rank that finds a newer epoch in the run
// directory belongs to a launch that was given up (a host cut off and
// replaced): it writes nothing more and exits with kExitFenced at its next
// beat, so it cannot mislead the supervisor or overwrite the new launch's
// work (a checkpoint commit checks the epoch too: ckpt/checkpoint.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ht/resilience/faults.h"
#include "ht/resilience/run_protocol.h"  // Phase, the exit codes, the records this guard writes

namespace ht::resilience {

/// This launch's epoch (HT_LAUNCH_EPOCH, set by htrun), or 0 when there is
/// none (no fencing). Throws kConfig when the variable is not a number >= 0.
std::int64_t launch_epoch();
/// The newest epoch launched into `run_dir` (<run_dir>/launch_epoch), or 0.
std::int64_t run_dir_epoch(const std::string& run_dir);
/// Whether a launch of `epoch` has been superseded in `run_dir` (a newer
/// epoch was launched there). Never for epoch 0.
bool superseded(std::int64_t epoch, const std::string& run_dir);

/// The node a world rank runs on, as the memory tiers of checkpoints name it:
/// "node<id>" for htrun's simulated nodes (HT_SIMULATED_NODES="<ranks per
/// node>:<id>,<id>,...", the active nodes in rank order), else the host name.
/// Throws kConfig when HT_SIMULATED_NODES is malformed or too short for the rank.
std::string node_label(int world_rank);
/// The label of the host this process runs on as node agents name it:
/// SLURMD_NODENAME under Slurm (several Slurm nodes may share a machine),
/// else the host name.
std::string host_label();
/// The label of the node agent that watches `world_rank`: "node<id>" for
/// htrun's simulated nodes (node_label), else host_label().
std::string agent_label(int world_rank);

namespace detail {
class AgentChannel;
}

/// The watchdog's rule: the message a rank at `step` in `phase`, its last
/// change of either at `last_change_ms`, ends with at `now_ms`; nullopt
/// while it may go on (before step 1, the start being the supervisor's; the
/// watchdog off, 0; or progress within `watchdog_ms`).
std::optional<std::string> watchdog_expired(int rank, std::int64_t step, Phase phase, std::int64_t last_change_ms,
                                            std::int64_t now_ms, std::int64_t watchdog_ms);

struct GuardOptions {
  std::string run_dir;
  std::chrono::milliseconds heartbeat{2000};
  std::chrono::milliseconds watchdog{300000};  // 0: off
  /// The guard's clock, milliseconds since the Unix epoch (empty: the wall
  /// clock); tests give their own.
  std::function<std::int64_t()> clock_ms;
  /// What the watchdog does when it fires (empty: exit(kExitHang, message),
  /// which ends the process); tests give their own, which may return.
  std::function<void(int code, const std::string& message)> on_watchdog;
};

class RankGuard {
 public:
  /// Starts the heartbeat and watchdog threads and installs the SIGTERM and
  /// SIGUSR1 handlers (one guard per process).
  RankGuard(const GuardOptions& options, int rank);
  ~RankGuard();
  RankGuard(const RankGuard&) = delete;
  RankGuard& operator=(const RankGuard&) = delete;

  /// Progress: the step and phase (Phase::kForwardBackward, kOptimizer,
  /// kCheckpoint, ...) the rank is in now. Cheap (three atomic stores) and
  /// callable from any thread; call it often.
  void progress(std::int64_t step, Phase phase);
  /// Whether SIGTERM or SIGUSR1 arrived.
  bool preempt_requested() const;
  /// Writes the exit record (and says it on stderr) without exiting. Ranks
  /// that leave together record before their last collective: once one
  /// rank exits, the launcher may end the others at once.
  void record_exit(int code, const std::string& message, const std::vector<int>& blamed = {});
  /// Writes the exit record, unless record_exit() did, and ends the process
  /// with `code` (flushing stdio). `blamed`: world ranks the record names as
  /// the cause, when it is not this rank (a straggler).
  [[noreturn]] void exit(int code, const std::string& message, const std::vector<int>& blamed = {});

  int rank() const { return rank_; }
  const std::string& run_dir() const { return options_.run_dir; }
  /// This launch's epoch (launch_epoch()).
  std::int64_t epoch() const { return epoch_; }

 private:
  void heartbeat_loop();
  void write_heartbeat();
  std::int64_t now_ms() const { return options_.clock_ms(); }
  /// Under an agent: leaves at once when it fenced this launch or is gone.
  void check_agent();

  GuardOptions options_;
  int rank_;
  std::int64_t epoch_ = 0;
  std::string host_;
  std::atomic<std::int64_t> step_{0};
  std::atomic<int> phase_{int(Phase::kStart)};
  std::atomic<std::int64_t> last_change_ms_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> exit_recorded_{false};
  std::unique_ptr<detail::AgentChannel> agent_;  // the node agent's channel, if any
  std::thread thread_;
};

}  // namespace ht::resilience
