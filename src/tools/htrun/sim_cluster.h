// Simulated hosts for the controller's tests and its scale bench
// (bench/control_plane_scale): each speaks the real agent protocol to the
// real controller over loopback TCP (ControllerLink, the agents' own RankBoard),
// with simulated ranks whose steps advance on the clock. Thousands run in
// one thread of one process. A host can crash (its connection and its
// daemon's port close), be cut off (silent), come back, and a rank can
// hang. Nothing here is used by htrun itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "htrun/process.h"
#include "htrun/spawner.h"
#include "htrun/wire.h"

namespace htrun {

struct SimOptions {
  double start_s = 0.2;  // a launch to its ranks' first step
  double step_s = 0.1;   // one step of every rank
  double beat_s = 0.1;   // the ranks' beat interval
  std::int64_t steps = 1000000;  // the job's last step: the ranks finish there
  /// > 0: each host listens on this port at its own loopback address
  /// (sim_address), as a host's sshd would, so the controller's probe of a
  /// host whose agent dropped is answered, or refused once it crashed.
  int daemon_port = 0;
};

/// The loopback address of simulated host `node`: 127.1.<node / 256>.<node % 256>.
std::string sim_address(int node);

class SimCluster {
 public:
  explicit SimCluster(SimOptions options);
  ~SimCluster();
  SimCluster(const SimCluster&) = delete;
  SimCluster& operator=(const SimCluster&) = delete;

  /// Starts host `node`'s agent (again, after a crash: a boot), connecting
  /// to `controller_host`:`port` with `secret`. Thread-safe.
  void start_host(int node, const std::string& controller_host, int port, const wire::Secret& secret);
  /// Every public call is thread-safe; the changes happen on the
  /// simulation's thread, in the order called, within about 10 ms.
  /// Its processes die, the agent's among them: its connection and its
  /// daemon's port close (the kernel answers with a reset). It stays down,
  /// whoever tries to start its agent, until boot(). Thread-safe.
  void crash(int node);
  /// A crashed host is up again, and its agent started as it last was.
  void boot(int node);
  /// Its link goes down: nothing more leaves or arrives, and no connection
  /// closes. heal() brings it back. Thread-safe.
  void cut(int node);
  void heal(int node);
  /// From now on `rank` makes no progress (it still beats); the others
  /// block at the next step's gradient reduction. Until the next launch.
  void hang(int rank);
  /// Health checks of `node` fail while it is marked so.
  void set_unhealthy(int node, bool unhealthy);
  /// From now on `node`'s link carries `bytes_per_s` (0: as fast as
  /// loopback again): its link tests' echoes are paced so, and while it
  /// runs ranks of a launch every rank's steps take `step_factor` times as
  /// long (a collective moves at the pace of its slowest link).
  void slow_link(int node, double bytes_per_s, double step_factor);

  /// Hosts whose agent has been welcomed, and summaries sent so far.
  int welcomed() const { return welcomed_.load(); }
  /// The newest launch any host was told of, and how many hosts were told
  /// to run ranks in `epoch`.
  std::int64_t newest_epoch();
  int hosts_in_launch(std::int64_t epoch);
  /// The host that runs `rank` in the newest launch; -1 when none does.
  int node_of_rank(int rank);
  std::uint64_t summaries_sent() const { return summaries_.load(); }
  /// The CPU seconds the simulation's thread has used.
  double thread_cpu_s() const { return thread_cpu_s_.load(); }

  /// A spawner whose agents are this cluster's hosts and whose launches
  /// are placeholders that end when stopped (the ranks' ends come through
  /// the agents); `launcher_exit` > 0 makes each launch exit at once with
  /// that code plus the launch's number instead (a launcher that fails).
  std::shared_ptr<Spawner> spawner(int launcher_exit = 0);
  /// Such a placeholder launch (exit_code > 0: one that has exited so).
  static std::unique_ptr<Process> placeholder_launch(int exit_code = 0);

 private:
  struct Host;
  void start_host_now(int node, const std::string& controller_host, int port, const wire::Secret& secret);
  void crash_now(int node);
  void loop();
  void run_host(Host& h, double now);
  void command(Host& h, const wire::Message& m, double now);

  /// Runs `change` on the simulation's thread, at its next turn: the
  /// callers' threads never wait for a busy simulation.
  void request(std::function<void()> change);
  /// Takes mu_ for a question from another thread, and asks the
  /// simulation's thread to let it in.
  std::unique_lock<std::mutex> ask();

  SimOptions options_;
  std::mutex mu_;  // guards hosts_ and the job's state while the simulation's thread works on them
  std::mutex requests_mu_;
  std::vector<std::function<void()>> requests_;
  std::atomic<int> asking_{0};
  std::vector<std::unique_ptr<Host>> hosts_;
  int epoll_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> welcomed_{0};
  std::atomic<std::uint64_t> summaries_{0};
  std::atomic<double> thread_cpu_s_{0};
  // The job as every host sees it: a hung rank and since when.
  int hung_rank_ = -1;
  double hung_at_ = 0;
  // A slow link in the launch: since when the steps crawl, and how much.
  double slow_since_ = 0, slow_factor_ = 1;
  double crawl_since_ = 0;  // > 0: a host with a slow link runs ranks of the newest launch
  std::set<int> unhealthy_;
  std::thread thread_;
};

}  // namespace htrun
