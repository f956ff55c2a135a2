// A child process under the supervisor: started in its own process group,
// its output teed to a log (and to ours, if asked) and scanned line by line,
// and a way to stop it (TERM to the group, then KILL). The real Process of
// htrun's spawner (spawner.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "htrun/launcher_event.h"
#include "htrun/process.h"

namespace htrun {

class ChildProcess : public Process {
 public:
  /// Starts `argv` (argv[0] looked up on PATH) with `env` ("NAME=value")
  /// added to the environment. Its stdout and stderr go to `log_path`, and
  /// to our stdout when `echo`. `stdin_text`, when not empty, is all its
  /// standard input (a secret, which a command line would show to anyone);
  /// otherwise it reads ours.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log_path,
               bool echo, LineParser parser = {}, const std::string& stdin_text = {});
  ~ChildProcess() override;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool poll() override;
  int wait(double timeout_s, double grace_s) override;
  void finish(double drain_s = 2.0) override;
  int exit_code() const override;
  void signal(int sig) override;
  /// SIGTERM to the whole group, then SIGKILL after `grace_s` seconds (at
  /// once for 0) to the group and every process below the child, in a
  /// group of its own or not; waits.
  void stop(double grace_s) override;
  LauncherEvent dead_rank() const override;
  LauncherEvent lost_host() const override;

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


}  // namespace htrun
