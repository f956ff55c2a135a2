// htrun's Job: fork/exec in a process group, output tee, stop.
#include "htrun/job.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <stdexcept>

namespace htrun {

Job::Job(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log_path)
    : log_path_(log_path) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    for (const std::string& e : env) ::putenv(const_cast<char*>(strdup(e.c_str())));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "htrun: cannot start %s: %s\n", args[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::setpgid(pid_, pid_);
  ::close(fds[1]);
  reader_ = std::thread([this, fd = fds[0]] { pump(fd); });
}

Job::~Job() {
  if (!done_) stop(2.0);
  if (reader_.joinable()) reader_.join();
}

void Job::pump(int fd) {
  std::ofstream log(log_path_, std::ios::app);
  // Open MPI: "mpirun noticed that process rank 2 with PID 123 on node vm exited on signal 9 (Killed)."
  const std::regex dead(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal)");
  std::string line;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    std::fwrite(buf, 1, std::size_t(n), stdout);
    std::fflush(stdout);
    log.write(buf, n);
    log.flush();
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        line.push_back(buf[i]);
        continue;
      }
      std::smatch m;
      if (dead_rank_ < 0 && std::regex_search(line, m, dead)) {
        dead_rank_ = std::atoi(m[1].str().c_str());
        dead_time_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      }
      line.clear();
    }
  }
  ::close(fd);
}

bool Job::poll() {
  if (done_) return true;
  const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) done_ = true;
  return done_;
}

int Job::exit_code() const {
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

void Job::stop(double grace_s) {
  if (done_) return;
  ::kill(-pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (poll()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid_, SIGKILL);
  ::waitpid(pid_, &status_, 0);
  done_ = true;
}

}  // namespace htrun
