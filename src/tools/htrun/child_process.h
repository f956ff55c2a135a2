// A child process under the supervisor: started in its own process group,
// its output teed to a log (and to ours, if asked) and scanned line by line,
// and a way to stop it (TERM to the group, then KILL).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "htrun/launcher_event.h"

namespace htrun {

class ChildProcess {
 public:
  /// Called for each line of output: what it reports, if anything.
  using LineParser = std::function<LauncherEvent(const std::string& line)>;

  /// Starts `argv` (argv[0] looked up on PATH) with `env` ("NAME=value")
  /// added to the environment. Its stdout and stderr go to `log_path`, and
  /// to our stdout when `echo`.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log_path,
      bool echo, LineParser parser = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// Non-blocking: true once the child has exited.
  bool poll();
  /// Waits up to `timeout_s` for the exit, then stops it; returns exit_code().
  int wait(double timeout_s, double grace_s);
  /// After the exit: reads what is left of the output (at most `drain_s`:
  /// a process outside the group may hold the pipe open) and stops reading,
  /// so dead_rank() has seen every line.
  void finish(double drain_s = 2.0);
  /// Exit code, or 128 + the signal that ended it.
  int exit_code() const;
  /// Sends `sig` to the child itself (a launcher forwards it to the ranks).
  void signal(int sig);
  /// SIGTERM to the whole group, then SIGKILL after `grace_s` seconds (at
  /// once for 0) to the group and every process below the child, in a
  /// group of its own or not; waits.
  void stop(double grace_s);
  /// The first rank the output reported dead (rank -1 when none), and the
  /// first host it reported lost (host "" when none), each with the time
  /// its line was read (seconds since the epoch).
  LauncherEvent dead_rank() const;
  LauncherEvent lost_host() const;

 private:
  void pump(int fd);

  pid_t pid_ = -1;
  int status_ = 0;
  bool done_ = false;
  bool echo_ = false;
  LineParser parser_;
  std::atomic<bool> reader_done_{false}, stop_reading_{false};
  mutable std::mutex events_mu_;
  LauncherEvent dead_rank_, lost_host_;
  std::string log_path_;
  std::thread reader_;
};

/// Seconds since the epoch (the clock heartbeats and exit records use).
double now_s();

}  // namespace htrun
