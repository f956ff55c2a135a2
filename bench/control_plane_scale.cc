// control_plane_scale: htrun's controller (the real Supervisor, its detectors
// and its agents' protocol) at a size no machine here has. The controller
// runs in a child process of its own, so its CPU time and memory are its
// alone; this process runs the hosts, simulated (htrun/sim_cluster.h): each
// speaks the real agent protocol over loopback TCP, with simulated ranks
// whose steps advance on the clock. Every figure is of simulated hosts.
//
//   control_plane_scale --hosts N [--ranks-per-host 8] [--summary-interval-ms MS] [--unreachable-after S]
//
// One run: the hosts connect and the job starts; a quiet window measures the
// controller's share of one core and its memory; then a host crashes (its
// agent's connection and its daemon's port close), a host is cut off (its
// link silent), and a rank hangs, one after another, each decided and the
// job relaunched; then the controller is preempted and its report read.
// Prints one JSON line: hosts, ranks, controller_cpu_pct, controller_rss_mb,
// host_loss_decided_s, partition_decided_s, hang_decided_s (after the hang
// timeout), relaunch_ack_s (the slowest of the relaunches: Launch sent to
// the last agent's acknowledgement), and the settings. Exit 1 when a fault
// is not decided, or decided as the wrong kind or host, within its bound.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "htrun/sim_cluster.h"
#include "htrun/supervisor.h"

namespace fs = std::filesystem;
using namespace htrun;

namespace {

struct Options {
  int hosts = 64;
  int ranks_per_host = 8;
  int spares = 2;
  int summary_interval_ms = 0;  // 0: htrun's own choice for the size
  double hang_timeout_s = 6;
  double unreachable_after_s = 2;
  double steady_s = 10;
  double bound_s = 120;  // every phase of the run ends within this, or the run fails
  std::string work = "";
};

void sleep_for(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// The child's CPU seconds (user + system) and its resident and peak memory (MB).
double cpu_s(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / double(::sysconf(_SC_CLK_TCK));
}

double status_mb(pid_t pid, const std::string& key) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  return 0;
}

// The controller's spawner in the child: each agent it starts is a line to
// the parent, which starts that simulated host; a launch is a placeholder
// (the simulated ranks start when their agents are told the launch).
class PipeSpawner : public Spawner {
 public:
  explicit PipeSpawner(int fd) : fd_(fd) {}
  std::unique_ptr<Process> launch(const std::vector<std::string>&, const std::vector<std::string>&,
                                  const std::string&, Process::LineParser) override {
    return SimCluster::placeholder_launch();
  }
  std::unique_ptr<Process> agent(const Node& node, const std::vector<std::string>& argv, const wire::Secret& secret,
                                 const std::string&) override {
    const auto at = std::find(argv.begin(), argv.end(), "--controller");
    const std::string line = fmt::format("{} {} {}\n", node.id, *(at + 1), wire::secret_hex(secret));
    [[maybe_unused]] const ssize_t written = ::write(fd_, line.data(), line.size());
    return SimCluster::placeholder_launch(1);  // exited: the host's agent lives in the parent
  }

 private:
  int fd_;
};

int run_controller(const Options& o, int pipe_fd) {
  std::ofstream hostfile(fs::path(o.work) / "hosts");
  for (int n = 0; n < o.hosts + o.spares; ++n) hostfile << sim_address(n) << " slots=" << o.ranks_per_host << "\n";
  hostfile.close();
  int slots = 0;
  Cluster cluster = Cluster::from_hostfile((fs::path(o.work) / "hosts").string(), &slots);
  SupervisorOptions s;
  s.slots = slots;
  s.spares = o.spares;
  s.run_dir = (fs::path(o.work) / "run").string();
  s.max_restarts = 10;
  s.backoff_s = 0.1;
  s.hang_timeout_s = o.hang_timeout_s;
  s.unreachable_after_s = o.unreachable_after_s;
  s.start_timeout_s = 60;
  s.probe_port = 2222;
  s.controller_address = "127.0.0.1";
  s.summary_interval_ms = o.summary_interval_ms;
  s.agent_timeout_s = 60;
  s.ack_timeout_s = 10;
  s.program = {"simulated-ranks"};
  s.health_tool = "ht-health";
  const Report report = Supervisor(s, std::move(cluster), {}, std::make_shared<PipeSpawner>(pipe_fd)).run();
  return report.exit_code;
}

// Reads the controller's agent requests and starts those hosts.
void serve_pipe(int fd, SimCluster& sim, const std::atomic<bool>& stop) {
  std::string buffer;
  char chunk[4096];
  while (!stop) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        sleep_for(0.01);
        continue;
      }
      return;
    }
    buffer.append(chunk, std::size_t(n));
    for (auto nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n')) {
      std::istringstream line(buffer.substr(0, nl));
      buffer.erase(0, nl + 1);
      int node = 0;
      std::string controller, secret_hex;
      line >> node >> controller >> secret_hex;
      const auto secret = wire::parse_secret_hex(secret_hex);
      const auto colon = controller.rfind(':');
      if (secret && colon != std::string::npos)
        sim.start_host(node, controller.substr(0, colon), std::stoi(controller.substr(colon + 1)), *secret);
    }
  }
}

// Waits until `ready` or the bound; false on the bound.
bool wait_until(const std::function<bool()>& ready, double bound_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(bound_s);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > until) return false;
    sleep_for(0.02);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"control_plane_scale: htrun's controller against simulated hosts speaking the agent protocol"};
  app.add_option("--hosts", o.hosts, "active simulated hosts")->check(CLI::Range(2, 65000));
  app.add_option("--ranks-per-host", o.ranks_per_host, "simulated ranks per host")->check(CLI::PositiveNumber);
  app.add_option("--summary-interval-ms", o.summary_interval_ms,
                 "each agent's summary interval (default: htrun's for the size, auto_summary_interval_ms)");
  app.add_option("--hang-timeout", o.hang_timeout_s, "the controller's hang timeout (s)")->capture_default_str();
  app.add_option("--unreachable-after", o.unreachable_after_s, "an agent's silence before its host is cut off (s)")
      ->capture_default_str();
  app.add_option("--steady", o.steady_s, "seconds of the quiet window that measures CPU and memory")->capture_default_str();
  app.add_option("--bound", o.bound_s, "seconds each phase may take before the run fails")->capture_default_str();
  app.add_option("--work", o.work, "a scratch directory (default: a new one under /tmp)");
  CLI11_PARSE(app, argc, argv);
  // Two descriptors a host (its connection, its daemon's port) on each side.
  // Raised past the hard limit where this process may (root), else to it.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const rlim_t wanted = rlim_t(4 * (o.hosts + o.spares) + 1024);
  if (files.rlim_max < wanted) {
    const rlimit more{wanted, wanted};
    if (::setrlimit(RLIMIT_NOFILE, &more) == 0) files = more;
  }
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur < wanted)
    std::fprintf(stderr, "# control_plane_scale: warning: %llu file descriptors allowed, %llu wanted; hosts past "
                 "that never join\n", (unsigned long long)files.rlim_cur, (unsigned long long)wanted);
  if (o.summary_interval_ms <= 0)
    o.summary_interval_ms = auto_summary_interval_ms(std::size_t(o.hosts + o.spares), o.unreachable_after_s);
  if (o.work.empty()) o.work = (fs::temp_directory_path() / fmt::format("control_plane_scale_{}", ::getpid())).string();
  fs::remove_all(o.work);
  fs::create_directories(o.work);
  std::fprintf(stderr, "# control_plane_scale: %d simulated hosts x %d ranks (+%d spares), summaries every %d ms\n",
               o.hosts, o.ranks_per_host, o.spares, o.summary_interval_ms);

  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    // A full pipe drops the request: the controller starts a missing agent
    // again a second later, and must never block on the simulation.
    ::fcntl(pipe_fds[1], F_SETFL, O_NONBLOCK);
    const int log = ::open((fs::path(o.work) / "controller.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::_exit(run_controller(o, pipe_fds[1]));
  }
  ::close(pipe_fds[1]);
  SimCluster sim(SimOptions{.start_s = 0.5, .step_s = 0.2, .beat_s = 0.2, .steps = 1000000, .daemon_port = 2222});
  std::atomic<bool> stop{false};
  std::thread pipe_reader([&] { serve_pipe(pipe_fds[0], sim, stop); });
  int failures = 0;
  const auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "control_plane_scale: %s (see %s/controller.log)\n", what.c_str(), o.work.c_str());
    ++failures;
  };
  const int total = o.hosts + o.spares;
  const auto launch_running = [&](std::int64_t epoch) {
    return [&sim, epoch, n = o.hosts] { return sim.newest_epoch() >= epoch && sim.hosts_in_launch(epoch) == n; };
  };
  const auto t_start = std::chrono::steady_clock::now();
  if (!wait_until([&] { return sim.welcomed() >= total; }, o.bound_s) || !wait_until(launch_running(1), o.bound_s))
    fail("the hosts never all joined the first launch");
  const double joined_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  // The quiet window: the job runs, every agent summarizes.
  sleep_for(2);
  const double cpu0 = cpu_s(child), sim0 = sim.thread_cpu_s();
  const auto w0 = std::chrono::steady_clock::now();
  sleep_for(o.steady_s);
  const double window_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const double cpu_pct = 100 * (cpu_s(child) - cpu0) / window_s;
  const double sim_pct = 100 * (sim.thread_cpu_s() - sim0) / window_s;
  const double rss_mb = status_mb(child, "VmRSS");

  // Faults, one after another, each on a host of the running launch.
  const double crashed_at = now_s();
  sim.crash(1);
  if (!wait_until(launch_running(2), o.bound_s)) fail("the relaunch after the crash never ran");
  sleep_for(2);
  const double cut_at = now_s();
  sim.cut(2);
  if (!wait_until(launch_running(3), o.bound_s)) fail("the relaunch after the cut never ran");
  sleep_for(2);
  const int hung_rank = 3 * o.ranks_per_host + 1;  // a rank of the fourth host of the launch
  const int hung_node = sim.node_of_rank(hung_rank);
  const double hung_at = now_s();
  sim.hang(hung_rank);
  if (!wait_until(launch_running(4), o.bound_s)) fail("the relaunch after the hang never ran");
  sleep_for(1);
  const double peak_mb = status_mb(child, "VmHWM");
  ::kill(child, SIGTERM);
  int status = 0;
  bool exited = wait_until([&] { return ::waitpid(child, &status, WNOHANG) == child; }, o.bound_s);
  if (!exited) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    fail("the controller did not stop when preempted");
  }
  stop = true;
  ::close(pipe_fds[0]);
  pipe_reader.join();

  nlohmann::json report;
  std::ifstream(ht::resilience::supervisor_report_path((fs::path(o.work) / "run").string())) >> report;
  const auto& incidents = report["incidents"];
  const auto decided = [&](std::size_t k, const char* kind, int node, double at) -> double {
    if (incidents.size() <= k) {
      fail(fmt::format("no incident {} ({})", k + 1, kind));
      return -1;
    }
    const auto& i = incidents[k];
    if (i["kind"] != kind || i["node"] != node)
      fail(fmt::format("incident {} was {} of node {}, not {} of node {}", k + 1, i["kind"].get<std::string>(),
                       i["node"].get<int>(), kind, node));
    return i["detected_at"].get<double>() - at;
  };
  const double host_loss_s = decided(0, "host-lost", 1, crashed_at);
  const double partition_s = decided(1, "host-lost", 2, cut_at);
  const double hang_s = decided(2, "hang", hung_node, hung_at);
  double ack_s = 0;
  for (const auto& l : report["launches"]) ack_s = std::max(ack_s, l["ack_s"].get<double>());
  nlohmann::json line{{"hosts", o.hosts},
                      {"ranks", o.hosts * o.ranks_per_host},
                      {"simulated", true},
                      {"summary_interval_ms", o.summary_interval_ms},
                      {"controller_cpu_pct", cpu_pct},
                      {"controller_rss_mb", rss_mb},
                      {"controller_peak_rss_mb", peak_mb},
                      {"simulation_cpu_pct", sim_pct},
                      {"joined_s", joined_s},
                      {"host_loss_decided_s", host_loss_s},
                      {"partition_decided_s", partition_s},
                      {"unreachable_after_s", o.unreachable_after_s},
                      {"hang_decided_s", hang_s},
                      {"hang_timeout_s", o.hang_timeout_s},
                      {"relaunch_ack_s", ack_s},
                      {"agent_frames", report["agent_frames"]},
                      {"agent_frames_dropped", report["agent_frames_dropped"]},
                      {"summaries_sent", sim.summaries_sent()}};
  std::printf("%s\n", line.dump().c_str());
  if (failures == 0) fs::remove_all(o.work);
  return failures == 0 ? 0 : 1;
}
