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
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace htrun {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const std::string& log_path, bool echo, LineParser parser, const std::string& stdin_text)
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
  // Standard input given: a pipe holding it all (a few bytes: the write
  // below cannot block), closed after.
  int input[2] = {-1, -1};
  if (!stdin_text.empty() && ::pipe2(input, O_CLOEXEC) != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    if (input[0] >= 0) ::close(input[0]), ::close(input[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid_ == 0) {
    ::setpgid(0, 0);
    if (input[0] >= 0) ::dup2(input[0], 0);
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
  if (input[0] >= 0) {
    ::close(input[0]);
    [[maybe_unused]] const ssize_t written = ::write(input[1], stdin_text.data(), stdin_text.size());
    ::close(input[1]);
  }
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

namespace {

// Every process below `root`, from /proc (each one's parent): a launcher
// may start some in groups of their own (Open MPI's ssh clients), which a
// signal to its group misses.
std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;  // parent -> child
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator("/proc", fs::directory_options::skip_permission_denied)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const std::size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 1));
    std::string state;
    pid_t parent = 0;
    if (rest >> state >> parent) children.emplace(parent, pid_t(std::stol(name)));
  }
  std::vector<pid_t> found;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      found.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return found;
}

}  // namespace

void ChildProcess::stop(double grace_s) {
  if (done_) return;
  if (grace_s > 0) {
    ::kill(-pid_, SIGTERM);
    const double deadline = now_s() + grace_s;
    while (now_s() < deadline) {
      if (poll()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  // The tree first: once the child is gone, its children are no longer
  // known as its. A process left would hold the output pipe open (and a
  // launcher's ssh client keeps its remote side alive).
  const std::vector<pid_t> tree = descendants(pid_);
  ::kill(-pid_, SIGKILL);
  for (pid_t p : tree) ::kill(p, SIGKILL);
  ::waitpid(pid_, &status_, 0);
  done_ = true;
}

}  // namespace htrun
