// One launch of the job under the supervisor: mpirun as a child process in
// its own process group, its output teed to a log and scanned for the rank
// that died, and a way to stop it (TERM, then KILL).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace htrun {

class Job {
 public:
  /// Starts `argv` (argv[0] looked up on PATH) with `env` added to the
  /// environment; its stdout and stderr go to ours and to `log_path`.
  Job(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log_path);
  ~Job();

  /// Non-blocking: true once the child has exited; then status() holds its wait status.
  bool poll();
  int status() const { return status_; }
  /// Exit code (or 128 + signal).
  int exit_code() const;
  /// SIGTERM to the whole group, then SIGKILL after `grace_s` seconds; waits.
  void stop(double grace_s);
  /// The rank mpirun reported dead ("process rank N ... exited on signal"), or -1.
  int dead_rank() const { return dead_rank_.load(); }
  /// When that report was read (seconds since the epoch), or 0.
  double dead_time() const { return dead_time_.load(); }

 private:
  void pump(int fd);

  pid_t pid_ = -1;
  int status_ = 0;
  bool done_ = false;
  std::atomic<int> dead_rank_{-1};
  std::atomic<double> dead_time_{0};
  std::string log_path_;
  std::thread reader_;
};

}  // namespace htrun
