// htrun's node agent (agent.h).
#include "htrun/agent.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ht/resilience/rank_guard.h"
#include "ht/resilience/run_protocol.h"

namespace htrun {
namespace {

namespace protocol = ht::resilience;

constexpr std::size_t kHealthTailBytes = 4096;
// After a TERM, how long the agent goes on watching ranks that save.
constexpr double kTermGraceS = 60;

volatile sig_atomic_t g_terminate = 0;
void on_terminate(int) { g_terminate = 1; }

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The exit status a rank that just died left, if its zombie can still be
// read (its parent, the launcher's daemon, reaps it at once): field 52 of
// /proc/<pid>/stat (Linux 3.5 on); -1 otherwise.
int zombie_status(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text;
  std::getline(in, text);
  const auto close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string state;
  fields >> state;
  if (state != "Z") return -1;
  std::string field;
  for (int i = 4; i <= 52 && fields >> field; ++i)
    if (i == 52) return std::stoi(field);
  return -1;
}

}  // namespace

void prepare_private_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("ht-agent: cannot make {}: {}", dir, std::strerror(errno)));
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(fmt::format("ht-agent: {} is not a directory", dir));
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    throw std::runtime_error(fmt::format(
        "ht-agent: {} belongs to uid {} with mode {:o}: the ranks' socket must be the job owner's alone (uid {}, "
        "mode 700); remove it or give htrun another --agent-dir",
        dir, st.st_uid, st.st_mode & 0777, ::geteuid()));
}

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      socket_path_(protocol::agent_socket_path(options_.socket_dir, options_.label)),
      link_(options_.controller_host, options_.controller_port, options_.secret, options_.node, options_.label) {
  prepare_private_dir(options_.socket_dir);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(address.sun_path))
    throw std::runtime_error(fmt::format("ht-agent: the socket path {} is too long for a Unix socket", socket_path_));
  std::memcpy(address.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  // An agent of this host that is still there (it outlived a cut of its
  // link, and htrun started another meanwhile) keeps the place: it has the
  // ranks, and it reconnects by itself.
  if (const int probe = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0); probe >= 0) {
    const bool answers = ::connect(probe, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    ::close(probe);
    if (answers) throw AgentAlreadyRuns(fmt::format("ht-agent: an agent already answers at {}", socket_path_));
  }
  ::unlink(socket_path_.c_str());  // an earlier agent's, gone
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::chmod(socket_path_.c_str(), 0600) != 0 || ::listen(listen_fd_, 1024) != 0)
    throw std::runtime_error(fmt::format("ht-agent: cannot listen at {}: {}", socket_path_, std::strerror(errno)));
}

Agent::~Agent() {
  for (RankConnection& r : ranks_) ::close(r.fd);
  for (HealthRun& h : health_) {
    ::kill(-h.pid, SIGKILL);
    ::waitpid(h.pid, nullptr, 0);
    ::close(h.out_fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::unlink(socket_path_.c_str());
  ::rmdir(options_.socket_dir.c_str());  // the last agent of a host's directory takes it (others' sockets keep it)
}

double Agent::now() const { return double(wall_ms()) / 1000; }

int Agent::run() {
  ::signal(SIGPIPE, SIG_IGN);
  // A scheduler that preempts the whole allocation signals every task at
  // once, the agents' among them: the ranks save and leave on their TERM,
  // and the agent keeps watching them until they have (a rank whose agent
  // is gone stops at once, unsaved). A SIGUSR1 is the ranks' business.
  ::signal(SIGTERM, on_terminate);
  ::signal(SIGINT, on_terminate);
  ::signal(SIGHUP, on_terminate);
  ::signal(SIGUSR1, SIG_IGN);
  double terminate_by = 0;
  for (;;) {
    const double t = now();
    if (g_terminate && terminate_by == 0) terminate_by = t + kTermGraceS;
    if (terminate_by > 0 && (ranks_.empty() || t > terminate_by)) {
      end_ranks(-1);
      return 0;
    }
    link_.tick(t);
    // The controller gone: after its allowance, end the ranks (no orphan
    // writes the run directory); after the linger time, leave.
    const double lost = link_.lost_since_s();
    const double allowed_s = double(link_.welcome().controller_lost_ms) / 1000;
    if (lost > 0 && !ended_for_loss_ && t - lost > allowed_s) {
      std::fprintf(stderr, "ht-agent %s: no controller for %.1f s: ending this host's ranks\n",
                   options_.label.c_str(), t - lost);
      end_ranks(-1);
      ended_for_loss_ = true;
    }
    // Cut off from htrun, perhaps not from the run directory: a newer
    // launch there supersedes this host's ranks at once.
    if (lost > 0 && !options_.run_dir.empty() && board_.epoch() > 0 && t >= next_epoch_look_s_) {
      next_epoch_look_s_ = t + 0.5;
      if (const std::int64_t newest = protocol::run_dir_epoch(options_.run_dir); newest > board_.epoch()) {
        if (ranks_left(newest - 1) > 0)
          std::fprintf(stderr, "ht-agent %s: launch %lld superseded launch %lld in %s: ending its ranks here\n",
                       options_.label.c_str(), (long long)newest, (long long)board_.epoch(), options_.run_dir.c_str());
        end_ranks(newest - 1);
      }
    }
    // Nothing listens at htrun's port any more (every try refused, not
    // timed out as across a cut link): htrun has ended, without the Bye that
    // reaches the agents it knows of (one that was still starting). Its
    // ranks are ended by now; leave rather than linger.
    if (const double refused = link_.refused_since_s();
        lost > 0 && refused > 0 && t - refused > std::max(2.0, allowed_s)) {
      std::fprintf(stderr, "ht-agent %s: htrun's port %s:%d refused every connection for %.1f s: htrun has ended; exiting\n",
                   options_.label.c_str(), options_.controller_host.c_str(), options_.controller_port, t - refused);
      end_ranks(-1);
      return 0;
    }
    if (lost > 0 && t - lost > options_.linger_s) {
      std::fprintf(stderr, "ht-agent %s: no controller for %.0f s: exiting\n", options_.label.c_str(), t - lost);
      end_ranks(-1);
      return 1;
    }
    if (link_.welcomed()) ended_for_loss_ = false;

    std::vector<pollfd> fds;
    fds.push_back({listen_fd_, POLLIN, 0});
    const int link_fd = link_.fd();
    fds.push_back({link_fd, short(POLLIN | (link_.want_write() ? POLLOUT : 0)), 0});
    for (const RankConnection& r : ranks_) fds.push_back({r.fd, POLLIN, 0});
    for (const HealthRun& h : health_) fds.push_back({h.out_fd, POLLIN, 0});
    const double until_summary = link_.welcomed() ? std::max(0.0, next_summary_s_ - t) : 0.05;
    ::poll(fds.data(), fds.size(), int(std::min(0.05, until_summary) * 1000) + 1);

    if (fds[0].revents) accept_ranks();
    if (link_fd >= 0 && link_fd == link_.fd()) {
      if (fds[1].revents & POLLOUT) link_.on_writable(now());
      if (fds[1].revents & (POLLIN | POLLHUP | POLLERR))
        for (const wire::Message& m : link_.on_readable(now())) command(m);
      if (bye_) {
        end_ranks(-1);
        return 0;
      }
    }
    for (std::size_t i = 0; i < ranks_.size(); ++i)
      if (i + 2 < fds.size() && fds[i + 2].fd == ranks_[i].fd && fds[i + 2].revents) read_rank(ranks_[i]);
    std::erase_if(ranks_, [](const RankConnection& r) { return r.fd < 0; });
    poll_health();
    send_acks();
    if (link_.welcomed() && now() >= next_summary_s_) {
      link_.send(board_.summary(wall_ms()));
      next_summary_s_ = now() + double(link_.welcome().summary_interval_ms) / 1000;
    }
  }
}

void Agent::accept_ranks() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::geteuid()) {
      ++refused_peers_;  // the directory's mode keeps others out; this is the second lock
      ::close(fd);
      continue;
    }
    ranks_.push_back({.fd = fd, .pid = cred.pid, .rank = -1, .epoch = 0, .exited = false});
  }
}

void Agent::read_rank(RankConnection& r) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::recv(r.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      rank_gone(r);
      return;
    }
    if (n < 0) return;
    const auto m = protocol::parse_agent_message(std::string_view(buffer, std::size_t(n)));
    if (!m) continue;  // not the protocol's: ignored
    if (const auto* beat = std::get_if<protocol::Heartbeat>(&*m)) {
      r.rank = beat->rank;
      r.epoch = beat->epoch;
      if (board_.epoch() > 0 && beat->epoch > 0 && beat->epoch < board_.epoch()) {
        // A rank of a launch given up (its host was cut off, now back): it
        // must not go on.
        const std::string fence = protocol::format_agent_message(protocol::Fence{board_.epoch()});
        ::send(r.fd, fence.data(), fence.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        ::kill(r.pid, SIGKILL);
        continue;
      }
      if (board_.beat(*beat)) board_.set_live(beat->rank, true);
    } else if (const auto* exit = std::get_if<protocol::ExitRecord>(&*m)) {
      if (r.rank < 0) r.rank = exit->rank;
      if (!board_.holds(exit->rank) || !protocol::of_launch(exit->epoch, board_.epoch())) continue;
      r.exited = true;
      link_.send(wire::RankExit{*exit});
    }
  }
}

void Agent::rank_gone(RankConnection& r) {
  if (r.rank >= 0 && board_.holds(r.rank) && protocol::of_launch(r.epoch, board_.epoch())) {
    board_.set_live(r.rank, false);
    if (!r.exited) {
      wire::RankDied died{.rank = r.rank, .pid = int(r.pid), .epoch = r.epoch, .time_ms = wall_ms(), .last = {},
                          .status = zombie_status(r.pid)};
      if (const protocol::Heartbeat* b = board_.last(r.rank)) died.last = place_of(*b);
      died.last.rank = r.rank;
      link_.send(died);
    }
  }
  ::close(r.fd);
  r.fd = -1;
}

void Agent::end_ranks(std::int64_t epoch) {
  for (const RankConnection& r : ranks_)
    if (r.fd >= 0 && (epoch < 0 || r.epoch <= epoch)) ::kill(r.pid, SIGKILL);
}

int Agent::ranks_left(std::int64_t epoch) const {
  return int(std::count_if(ranks_.begin(), ranks_.end(),
                           [&](const RankConnection& r) { return r.fd >= 0 && r.epoch <= epoch; }));
}

void Agent::command(const wire::Message& m) {
  if (const auto* w = std::get_if<wire::Welcome>(&m)) {
    next_summary_s_ = now();
    if (w->epoch > 0) end_ranks(w->epoch - 1);  // launches given up while it was away
  } else if (const auto* launch = std::get_if<wire::Launch>(&m)) {
    if (launch->epoch != board_.epoch() || launch->first_rank != board_.first_rank() ||
        launch->ranks != board_.ranks())
      board_.launch(launch->epoch, launch->first_rank, launch->ranks);
    end_ranks(launch->epoch - 1);
    acks_.push_back({.request = launch->request, .epoch = launch->epoch, .until = launch->epoch - 1});
  } else if (const auto* end = std::get_if<wire::End>(&m)) {
    end_ranks(end->epoch);
    acks_.push_back({.request = end->request, .epoch = end->epoch, .until = end->epoch});
  } else if (const auto* signal = std::get_if<wire::Signal>(&m)) {
    for (const RankConnection& r : ranks_)
      if (r.fd >= 0 && (signal->epoch == 0 || r.epoch == signal->epoch)) ::kill(r.pid, signal->signal);
    link_.send(wire::Ack{.request = signal->request, .epoch = signal->epoch, .ranks_left = 0});
  } else if (const auto* check = std::get_if<wire::HealthCheck>(&m)) {
    start_health(*check);
  } else if (const auto* test = std::get_if<wire::LinkTest>(&m)) {
    for (const wire::LinkEcho& echo : wire::link_echoes(*test)) link_.send(echo);
  } else if (std::holds_alternative<wire::Bye>(m)) {
    bye_ = true;
  }
}

void Agent::send_acks() {
  // A rank KILLed is gone once its socket closes: acknowledged then.
  std::erase_if(acks_, [&](const PendingAck& a) {
    if (ranks_left(a.until) > 0) return false;
    link_.send(wire::Ack{.request = a.request, .epoch = a.epoch, .ranks_left = 0});
    return true;
  });
}

void Agent::start_health(const wire::HealthCheck& check) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    link_.send(wire::HealthResult{.request = check.request, .exit_code = -1, .output_tail = "pipe failed"});
    return;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    std::vector<char*> argv;
    for (const std::string& a : check.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "ht-agent: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out[1]);
  if (pid < 0) {
    ::close(out[0]);
    link_.send(wire::HealthResult{.request = check.request, .exit_code = -1, .output_tail = "fork failed"});
    return;
  }
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  health_.push_back({.request = check.request, .pid = pid, .out_fd = out[0],
                     .deadline_s = now() + double(check.timeout_ms) / 1000, .tail = {}});
}

void Agent::poll_health() {
  std::erase_if(health_, [&](HealthRun& h) {
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(h.out_fd, buffer, sizeof(buffer))) > 0) {
      h.tail.append(buffer, std::size_t(n));
      if (h.tail.size() > kHealthTailBytes) h.tail.erase(0, h.tail.size() - kHealthTailBytes);
    }
    int status = 0;
    const pid_t done = ::waitpid(h.pid, &status, WNOHANG);
    const bool over_time = done == 0 && now() > h.deadline_s;
    if (done == 0 && !over_time) return false;
    if (over_time) {
      ::kill(-h.pid, SIGKILL);
      ::waitpid(h.pid, &status, 0);
      h.tail += "\n(ht-agent: the check took too long and was ended)\n";
    }
    const int code = over_time ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ::close(h.out_fd);
    link_.send(wire::HealthResult{.request = h.request, .exit_code = code, .output_tail = h.tail});
    return true;
  });
}

}  // namespace htrun
