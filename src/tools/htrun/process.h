// A process the supervisor started (a launch, a node agent), as it watches
// one: ChildProcess for real, something else in tests and the scale bench
// (spawner.h).
#pragma once

#include <functional>
#include <string>

#include "htrun/launcher_event.h"

namespace htrun {

class Process {
 public:
  /// Called for each line of a launcher's output: what it reports, if anything.
  using LineParser = std::function<LauncherEvent(const std::string& line)>;

  virtual ~Process() = default;
  /// Non-blocking: true once the process has exited.
  virtual bool poll() = 0;
  /// Waits up to `timeout_s` for the exit, then stops it; returns exit_code().
  virtual int wait(double timeout_s, double grace_s) = 0;
  /// After the exit: reads what is left of the output (at most `drain_s`)
  /// and stops reading, so dead_rank() has seen every line.
  virtual void finish(double drain_s = 2.0) = 0;
  /// Exit code, or 128 + the signal that ended it.
  virtual int exit_code() const = 0;
  /// Sends `sig` to the process itself (a launcher forwards it to the ranks).
  virtual void signal(int sig) = 0;
  /// Ends it: TERM, then KILL after `grace_s` seconds (at once for 0); waits.
  virtual void stop(double grace_s) = 0;
  /// The first rank its output reported dead (rank -1 when none), and the
  /// first host it reported lost (host "" when none), each with the time
  /// its line was read (seconds since the epoch).
  virtual LauncherEvent dead_rank() const = 0;
  virtual LauncherEvent lost_host() const = 0;
};

/// Seconds since the epoch (the clock heartbeats and exit records use).
double now_s();

}  // namespace htrun
