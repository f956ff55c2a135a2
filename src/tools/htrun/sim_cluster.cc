// Simulated hosts (sim_cluster.h).
#include "htrun/sim_cluster.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <optional>

#include "htrun/controller_link.h"
#include "htrun/rank_board.h"

namespace htrun {
namespace {

using ht::resilience::ExitKind;
using ht::resilience::Heartbeat;
using ht::resilience::Phase;

constexpr std::uint64_t kDaemonTag = 1ull << 40;

double thread_cpu_now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct Place {
  std::int64_t step = 0;
  Phase phase = Phase::kStart;
  double progress_s = 0;
};

// Where every rank of a launch started at `t0` is at `t`, with no hang:
// start-up, then steps of forward-backward (half), gradient reduction and
// the optimizer, until the last step.
Place place_at(const SimOptions& o, double t0, double t) {
  const double run = t - t0 - o.start_s;
  if (run < 0) return {0, Phase::kStart, t0};
  const auto done = std::int64_t(run / o.step_s);
  const double step_start = t0 + o.start_s + double(done) * o.step_s;
  if (done >= o.steps) return {o.steps, Phase::kFinish, t0 + o.start_s + double(o.steps) * o.step_s};
  const double f = (run - double(done) * o.step_s) / o.step_s;
  if (f < 0.5) return {done + 1, Phase::kForwardBackward, step_start};
  if (f < 0.8) return {done + 1, Phase::kGradientReduction, step_start + 0.5 * o.step_s};
  return {done + 1, Phase::kOptimizer, step_start + 0.8 * o.step_s};
}

}  // namespace

std::string sim_address(int node) { return fmt::format("127.1.{}.{}", (node >> 8) & 255, node & 255); }

struct SimCluster::Host {
  int node = 0;
  std::string label;
  std::unique_ptr<ControllerLink> link;  // none: crashed, or told Bye
  int registered_fd = -1;                // the link's fd in the loop's epoll set
  int daemon_fd = -1;
  bool cut = false, welcomed = false;
  bool down = false;  // crashed, not booted
  double link_bytes_per_s = 0;   // > 0: a slow link
  double link_free_at = 0;       // when its link is done with what it was given
  std::vector<std::pair<double, wire::LinkEcho>> echoes;  // paced: when each may leave
  std::string controller_host;
  int controller_port = 0;
  wire::Secret secret{};
  RankBoard board;
  double launched_at = 0;
  bool ranks_ended = true;  // this launch's ranks all ended (finished, preempted, killed)
  bool preempt = false;     // a SIGUSR1 came: the ranks save and leave at the next look
  double next_summary_s = 0;
};

SimCluster::SimCluster(SimOptions options) : options_(options) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  thread_ = std::thread([this] { loop(); });
}

SimCluster::~SimCluster() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (auto& h : hosts_)
    if (h && h->daemon_fd >= 0) ::close(h->daemon_fd);
  ::close(epoll_fd_);
}

void SimCluster::request(std::function<void()> change) {
  std::lock_guard lock(requests_mu_);
  requests_.push_back(std::move(change));
}

std::unique_lock<std::mutex> SimCluster::ask() {
  ++asking_;
  std::unique_lock lock(mu_);
  --asking_;
  return lock;
}

void SimCluster::start_host(int node, const std::string& controller_host, int port, const wire::Secret& secret) {
  request([=, this] { start_host_now(node, controller_host, port, secret); });
}

void SimCluster::start_host_now(int node, const std::string& controller_host, int port, const wire::Secret& secret) {
  if (std::size_t(node) >= hosts_.size()) hosts_.resize(std::size_t(node) + 1);
  auto& h = hosts_[std::size_t(node)];
  if (!h) {
    h = std::make_unique<Host>();
    h->node = node;
    h->label = options_.daemon_port > 0 ? sim_address(node) : fmt::format("sim{}", node);
  }
  h->controller_host = controller_host;
  h->controller_port = port;
  h->secret = secret;
  if (h->link || h->down) return;  // running, or down until booted
  h->link = std::make_unique<ControllerLink>(controller_host, port, secret, node, h->label);
  h->cut = false;
  h->welcomed = false;
  if (options_.daemon_port > 0 && h->daemon_fd < 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(std::uint16_t(options_.daemon_port));
    ::inet_pton(AF_INET, sim_address(node).c_str(), &a.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && ::listen(fd, 64) == 0) {
      h->daemon_fd = fd;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kDaemonTag | std::uint64_t(node);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    } else {
      ::close(fd);
    }
  }
}

void SimCluster::crash(int node) { request([=, this] { crash_now(node); }); }

void SimCluster::crash_now(int node) {
  if (std::size_t(node) >= hosts_.size() || !hosts_[std::size_t(node)]) return;
  Host& h = *hosts_[std::size_t(node)];
  if (h.registered_fd >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, h.registered_fd, nullptr);
  h.registered_fd = -1;
  h.link.reset();  // closes the connection: the controller reads its end
  if (h.daemon_fd >= 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, h.daemon_fd, nullptr);
    ::close(h.daemon_fd);
    h.daemon_fd = -1;
  }
  h.ranks_ended = true;
  h.down = true;
}

void SimCluster::boot(int node) {
  request([=, this] {
    if (std::size_t(node) >= hosts_.size() || !hosts_[std::size_t(node)]) return;
    Host& h = *hosts_[std::size_t(node)];
    h.down = false;
    start_host_now(node, h.controller_host, h.controller_port, h.secret);
  });
}

std::int64_t SimCluster::newest_epoch() {
  const auto lock = ask();
  std::int64_t newest = 0;
  for (const auto& h : hosts_)
    if (h) newest = std::max(newest, h->board.epoch());
  return newest;
}

int SimCluster::hosts_in_launch(std::int64_t epoch) {
  const auto lock = ask();
  int n = 0;
  for (const auto& h : hosts_)
    if (h && h->link && h->board.epoch() == epoch && h->board.ranks() > 0) ++n;
  return n;
}

int SimCluster::node_of_rank(int rank) {
  const auto lock = ask();
  std::int64_t newest = 0;
  for (const auto& h : hosts_)
    if (h) newest = std::max(newest, h->board.epoch());
  for (const auto& h : hosts_)
    if (h && h->link && h->board.epoch() == newest && h->board.holds(rank)) return h->node;
  return -1;
}

void SimCluster::cut(int node) {
  request([=, this] {
    if (std::size_t(node) < hosts_.size() && hosts_[std::size_t(node)]) hosts_[std::size_t(node)]->cut = true;
  });
}

void SimCluster::heal(int node) {
  request([=, this] {
    if (std::size_t(node) < hosts_.size() && hosts_[std::size_t(node)]) hosts_[std::size_t(node)]->cut = false;
  });
}

void SimCluster::hang(int rank) {
  const double at = now_s();
  request([=, this] {
    hung_rank_ = rank;
    hung_at_ = at;
  });
}

void SimCluster::slow_link(int node, double bytes_per_s, double step_factor) {
  const double at = now_s();
  request([=, this] {
    if (std::size_t(node) >= hosts_.size() || !hosts_[std::size_t(node)]) return;
    hosts_[std::size_t(node)]->link_bytes_per_s = bytes_per_s;
    slow_since_ = bytes_per_s > 0 ? at : 0;
    slow_factor_ = bytes_per_s > 0 ? step_factor : 1;
  });
}

void SimCluster::set_unhealthy(int node, bool unhealthy) {
  request([=, this] {
    if (unhealthy) unhealthy_.insert(node);
    else unhealthy_.erase(node);
  });
}

void SimCluster::loop() {
  epoll_event events[512];
  while (!stop_) {
    const int n = ::epoll_wait(epoll_fd_, events, 512, 10);
    // A question from another thread goes first.
    while (asking_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::lock_guard lock(mu_);
    {
      std::vector<std::function<void()>> changes;
      {
        std::lock_guard requests(requests_mu_);
        changes.swap(requests_);
      }
      for (auto& change : changes) change();
    }
    const double t = now_s();
    for (int i = 0; i < n; ++i) {
      const std::uint64_t tag = events[i].data.u64;
      const auto node = std::size_t(tag & 0xffffffffu);
      if (node >= hosts_.size() || !hosts_[node]) continue;
      Host& h = *hosts_[node];
      if (tag & kDaemonTag) {  // a probe: accepted, then closed, as sshd would answer it
        for (int fd; (fd = ::accept4(h.daemon_fd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) ::close(fd);
        continue;
      }
      if (!h.link || h.cut) continue;
      if (events[i].events & EPOLLOUT) h.link->on_writable(t);
      if (h.link && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        for (const wire::Message& m : h.link->on_readable(t)) command(h, m, t);
    }
    // The steps crawl while a host with a slow link runs ranks of the newest launch.
    std::int64_t newest = 0;
    bool slow_in_launch = false;
    for (auto& h : hosts_)
      if (h) newest = std::max(newest, h->board.epoch());
    for (auto& h : hosts_)
      if (h && h->link_bytes_per_s > 0 && h->board.epoch() == newest && h->board.ranks() > 0) slow_in_launch = true;
    crawl_since_ = slow_in_launch ? slow_since_ : 0;
    for (auto& h : hosts_)
      if (h) run_host(*h, t);
    thread_cpu_s_ = thread_cpu_now_s();
  }
}

void SimCluster::run_host(Host& h, double t) {
  if (!h.link) return;
  if (!h.cut) h.link->tick(t);
  // The link's socket in the epoll set (it changes with each reconnection).
  const int fd = h.cut ? -1 : h.link->fd();
  if (fd != h.registered_fd) {
    if (h.registered_fd >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, h.registered_fd, nullptr);
    h.registered_fd = fd;
    if (fd >= 0) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
      ev.data.u64 = std::uint64_t(h.node);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    }
  }
  if (h.cut || !h.link->welcomed()) return;
  // Paced link-test echoes leave when the slow link has carried them.
  std::erase_if(h.echoes, [&](const auto& e) { return e.first <= t && h.link->send(e.second); });
  if (!h.welcomed) {
    h.welcomed = true;
    ++welcomed_;
  }
  if (t < h.next_summary_s) return;
  h.next_summary_s = t + double(h.link->welcome().summary_interval_ms) / 1000;
  // The ranks' newest beats, as they would have sent them.
  if (!h.ranks_ended) {
    const double beat_t = std::floor(t / options_.beat_s) * options_.beat_s;
    bool finished = true;
    // A crawl: time runs slow_factor_ times slower for the steps since it began.
    const double since = std::max(crawl_since_, h.launched_at);
    const auto dilated = [&](double x) { return crawl_since_ > 0 && x > since ? since + (x - since) / slow_factor_ : x; };
    const auto real = [&](double x) { return crawl_since_ > 0 && x > since ? since + (x - since) * slow_factor_ : x; };
    for (int r = h.board.first_rank(); r < h.board.first_rank() + h.board.ranks(); ++r) {
      Place p = place_at(options_, h.launched_at, dilated(beat_t));
      p.progress_s = real(p.progress_s);
      // A hang: the hung rank stops in the forward-backward of step H (the
      // step in progress, or the next when it was past that), and the
      // others block in H's gradient reduction, waiting for it.
      if (hung_rank_ >= 0 && hung_at_ > h.launched_at) {
        const Place at_hang = place_at(options_, h.launched_at, hung_at_);
        const std::int64_t stuck =
            std::max<std::int64_t>(1, at_hang.phase == Phase::kForwardBackward ? at_hang.step : at_hang.step + 1);
        const double stuck_start = h.launched_at + options_.start_s + double(stuck - 1) * options_.step_s;
        const Place hung{stuck, Phase::kForwardBackward, stuck_start};
        const Place blocked{stuck, Phase::kGradientReduction, stuck_start + 0.5 * options_.step_s};
        if (r == hung_rank_ && beat_t >= stuck_start) p = hung;
        else if (r != hung_rank_ && std::make_pair(p.step, p.phase) > std::make_pair(blocked.step, blocked.phase))
          p = blocked;
      }
      finished = finished && p.phase == Phase::kFinish;
      h.board.beat(Heartbeat{.rank = r, .host = h.label, .pid = 0, .step = p.step, .phase = p.phase,
                             .time_ms = std::llround(beat_t * 1000), .progress_ms = std::llround(p.progress_s * 1000),
                             .epoch = h.board.epoch()});
    }
    // The ranks leave: done, or saving for a preemption.
    if (finished || h.preempt) {
      const Heartbeat* any = h.board.last(h.board.first_rank());
      for (int r = h.board.first_rank(); r < h.board.first_rank() + h.board.ranks(); ++r) {
        h.link->send(wire::RankExit{ht::resilience::ExitRecord{
            .rank = r, .code = h.preempt ? ht::resilience::kExitPreempted : 0,
            .kind = h.preempt ? ExitKind::kPreempted : ExitKind::kOk, .step = any ? any->step : 0,
            .phase = Phase::kFinish, .time_ms = std::llround(t * 1000), .message = "simulated",
            .blamed_ranks = {}, .epoch = h.board.epoch()}});
        h.board.set_live(r, false);
      }
      h.ranks_ended = true;
    }
  }
  if (h.link->send(h.board.summary(std::llround(t * 1000)))) ++summaries_;
}

void SimCluster::command(Host& h, const wire::Message& m, double t) {
  if (const auto* launch = std::get_if<wire::Launch>(&m)) {
    if (launch->epoch != h.board.epoch()) {
      h.board.launch(launch->epoch, launch->first_rank, launch->ranks);
      h.launched_at = t;
      h.preempt = false;
      h.ranks_ended = launch->ranks == 0;
      for (int r = launch->first_rank; r < launch->first_rank + launch->ranks; ++r) h.board.set_live(r, true);
      if (hung_rank_ >= 0 && hung_at_ < t) hung_rank_ = -1;  // a new launch: the hang is over
    }
    h.link->send(wire::Ack{.request = launch->request, .epoch = launch->epoch, .ranks_left = 0});
  } else if (const auto* end = std::get_if<wire::End>(&m)) {
    if (h.board.epoch() <= end->epoch && !h.ranks_ended) {
      for (int r = h.board.first_rank(); r < h.board.first_rank() + h.board.ranks(); ++r) h.board.set_live(r, false);
      h.ranks_ended = true;
    }
    h.link->send(wire::Ack{.request = end->request, .epoch = end->epoch, .ranks_left = 0});
  } else if (const auto* signal = std::get_if<wire::Signal>(&m)) {
    if (signal->signal == SIGUSR1 && !h.ranks_ended) h.preempt = true;
    h.link->send(wire::Ack{.request = signal->request, .epoch = signal->epoch, .ranks_left = 0});
  } else if (const auto* check = std::get_if<wire::HealthCheck>(&m)) {
    const bool bad = unhealthy_.count(h.node) > 0;
    h.link->send(wire::HealthResult{.request = check->request, .exit_code = bad ? 1 : 0,
                                    .output_tail = bad ? "simulated host: unhealthy\n" : "simulated host: healthy\n"});
  } else if (const auto* test = std::get_if<wire::LinkTest>(&m)) {
    for (const wire::LinkEcho& echo : wire::link_echoes(*test)) {
      if (h.link_bytes_per_s <= 0) {
        h.link->send(echo);
        continue;
      }
      h.link_free_at = std::max(h.link_free_at, t) + double(echo.payload.size()) / h.link_bytes_per_s;
      h.echoes.emplace_back(h.link_free_at, echo);
    }
  } else if (std::holds_alternative<wire::Bye>(m)) {
    if (h.registered_fd >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, h.registered_fd, nullptr);
    h.registered_fd = -1;
    h.link.reset();
  }
}

namespace {

// A simulated host's agent, as the supervisor holds a started process: it
// has exited once its host is down or was told Bye.
class SimAgentProcess : public Process {
 public:
  explicit SimAgentProcess(std::function<bool()> running) : running_(std::move(running)) {}
  bool poll() override { return !running_(); }
  int wait(double, double) override { return 0; }
  void finish(double) override {}
  int exit_code() const override { return 0; }
  void signal(int) override {}
  void stop(double) override {}
  LauncherEvent dead_rank() const override { return {}; }
  LauncherEvent lost_host() const override { return {}; }

 private:
  std::function<bool()> running_;
};

// A launch's placeholder: the ranks are the simulated hosts'; it ends when
// stopped, or at once with `exit_code` (a launcher that fails).
class SimLaunch : public Process {
 public:
  explicit SimLaunch(int exit_code) : exited_(exit_code > 0), code_(exit_code) {}
  bool poll() override { return exited_; }
  int wait(double, double) override { return code_; }
  void finish(double) override {}
  int exit_code() const override { return code_; }
  void signal(int) override {}
  void stop(double) override {
    if (!exited_) code_ = 128 + SIGKILL;
    exited_ = true;
  }
  LauncherEvent dead_rank() const override { return {}; }
  LauncherEvent lost_host() const override { return {}; }

 private:
  bool exited_;
  int code_;
};

class SimSpawner : public Spawner {
 public:
  SimSpawner(SimCluster& cluster, int launcher_exit, std::function<bool(int)> running)
      : cluster_(cluster), launcher_exit_(launcher_exit), running_(std::move(running)) {}
  std::unique_ptr<Process> launch(const std::vector<std::string>&, const std::vector<std::string>&,
                                  const std::string&, Process::LineParser) override {
    ++launches_;
    return std::make_unique<SimLaunch>(launcher_exit_ > 0 ? launcher_exit_ + launches_ : 0);
  }
  std::unique_ptr<Process> agent(const Node& node, const std::vector<std::string>& argv, const wire::Secret& secret,
                                 const std::string&) override {
    // The controller's address is the agent command's --controller HOST:PORT.
    const auto at = std::find(argv.begin(), argv.end(), "--controller");
    const std::string controller = at != argv.end() && at + 1 != argv.end() ? *(at + 1) : "127.0.0.1:0";
    const auto colon = controller.rfind(':');
    cluster_.start_host(node.id, controller.substr(0, colon), std::stoi(controller.substr(colon + 1)), secret);
    return std::make_unique<SimAgentProcess>([this, id = node.id] { return running_(id); });
  }

 private:
  SimCluster& cluster_;
  int launcher_exit_;
  int launches_ = 0;
  std::function<bool(int)> running_;
};

}  // namespace

std::unique_ptr<Process> SimCluster::placeholder_launch(int exit_code) { return std::make_unique<SimLaunch>(exit_code); }

std::shared_ptr<Spawner> SimCluster::spawner(int launcher_exit) {
  return std::make_shared<SimSpawner>(*this, launcher_exit, [this](int node) {
    const auto lock = ask();
    return std::size_t(node) < hosts_.size() && hosts_[std::size_t(node)] && hosts_[std::size_t(node)]->link;
  });
}

}  // namespace htrun
