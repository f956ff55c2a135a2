// A child process under the supervisor: started in its own process group,
// its output teed to a log (and to ours, if asked) and scanned line by line,
// and a way to stop it (TERM to the group, then KILL).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace htrun {

class Job {
 public:
  /// Called for each line of output; returns a rank the launcher reports
  /// dead in that line, or -1.
  using DeadRankParser = std::function<int(const std::string& line)>;

  /// Starts `argv` (argv[0] looked up on PATH) with `env` ("NAME=value")
  /// added to the environment. Its stdout and stderr go to `log_path`, and
  /// to our stdout when `echo`.
  Job(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log_path,
      bool echo, DeadRankParser dead_rank_parser = {});
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

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
  /// SIGTERM to the whole group, then SIGKILL after `grace_s` seconds; waits.
  void stop(double grace_s);
  /// The first rank the output reported dead, or -1; and when that line was
  /// read (seconds since the epoch), or 0.
  int dead_rank() const { return dead_rank_.load(); }
  double dead_time() const { return dead_time_.load(); }

 private:
  void pump(int fd);

  pid_t pid_ = -1;
  int status_ = 0;
  bool done_ = false;
  bool echo_ = false;
  DeadRankParser parser_;
  std::atomic<bool> reader_done_{false}, stop_reading_{false};
  std::atomic<int> dead_rank_{-1};
  std::atomic<double> dead_time_{0};
  std::string log_path_;
  std::thread reader_;
};

/// Seconds since the epoch (the clock heartbeats and exit records use).
double now_s();

}  // namespace htrun
