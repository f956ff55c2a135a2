// htrun's ChildProcess: fork/exec in a process group, output tee, stop.
#include "htrun/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace htrun {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log_path,
         bool echo, LineParser parser)
    : echo_(echo), parser_(std::move(parser)), log_path_(log_path) {
  if (argv.empty()) throw std::invalid_argument("htrun: an empty command");
  // Everything the child needs is built before fork: the reader thread of
  // another ChildProcess may hold the allocator's lock at that moment, and the child
  // must not allocate until exec.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_entries;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('=') + 1);
    const bool overridden =
        std::any_of(env.begin(), env.end(), [&](const std::string& o) { return o.rfind(name, 0) == 0; });
    if (!overridden) env_entries.push_back(entry);
  }
  env_entries.insert(env_entries.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (std::string& e : env_entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execvpe(args[0], args.data(), envp.data());
    std::fprintf(stderr, "htrun: cannot start %s: %s\n", args[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::setpgid(pid_, pid_);
  ::close(fds[1]);
  reader_ = std::thread([this, fd = fds[0]] { pump(fd); });
}

ChildProcess::~ChildProcess() {
  if (!done_) stop(2.0);
  finish();
}

void ChildProcess::finish(double drain_s) {
  const double deadline = now_s() + drain_s;
  while (!reader_done_ && now_s() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop_reading_ = true;
  if (reader_.joinable()) reader_.join();
}

void ChildProcess::pump(int fd) {
  std::ofstream log(log_path_, std::ios::app);
  std::string line;
  char buf[4096];
  for (;;) {
    // Poll, so that finish() can end the reading even while some process
    // outside the job's group keeps the pipe open.
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) {
      if (stop_reading_) break;
      continue;
    }
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    if (echo_) {
      std::fwrite(buf, 1, std::size_t(n), stdout);
      std::fflush(stdout);
    }
    log.write(buf, n);
    log.flush();
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        line.push_back(buf[i]);
        continue;
      }
      if (parser_) {
        LauncherEvent e = parser_(line);
        e.time_s = now_s();
        std::lock_guard lock(events_mu_);
        if (e.rank >= 0 && dead_rank_.rank < 0) dead_rank_ = e;
        if (!e.host.empty() && lost_host_.host.empty()) lost_host_ = e;
      }
      line.clear();
    }
  }
  ::close(fd);
  reader_done_ = true;
}

LauncherEvent ChildProcess::dead_rank() const {
  std::lock_guard lock(events_mu_);
  return dead_rank_;
}

LauncherEvent ChildProcess::lost_host() const {
  std::lock_guard lock(events_mu_);
  return lost_host_;
}

bool ChildProcess::poll() {
  if (done_) return true;
  const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) done_ = true;
  if (r < 0 && errno != EINTR) {  // not our child any more (SIGCHLD ignored?): count it as failed
    status_ = 1 << 8;
    done_ = true;
  }
  return done_;
}

int ChildProcess::wait(double timeout_s, double grace_s) {
  const double deadline = now_s() + timeout_s;
  while (!poll() && now_s() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop(grace_s);
  finish();
  return exit_code();
}

int ChildProcess::exit_code() const {
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

void ChildProcess::signal(int sig) {
  if (!done_) ::kill(pid_, sig);
}

void ChildProcess::stop(double grace_s) {
  if (done_) return;
  ::kill(-pid_, SIGTERM);
  const double deadline = now_s() + grace_s;
  while (now_s() < deadline) {
    if (poll()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid_, SIGKILL);
  ::waitpid(pid_, &status_, 0);
  done_ = true;
}

}  // namespace htrun
