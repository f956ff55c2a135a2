// htrun's supervisor loop.
#include "htrun/supervisor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "ht/ckpt/checkpoint.h"
#include "htrun/child_process.h"
#include "htrun/run_files.h"

namespace fs = std::filesystem;
namespace protocol = ht::resilience;

namespace htrun {
namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_signal(int s) { g_stop_signal = s; }

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace

double Supervisor::comm_timeout_s() const { return std::max(1.0, options_.hang_timeout_s * 2.0 / 3.0); }

std::string Supervisor::memory_dir() const {
  return ht::ckpt::default_memory_dir((fs::path(options_.run_dir) / "checkpoints").string());
}

Supervisor::Supervisor(SupervisorOptions options, Cluster cluster, Clock clock)
    : options_(std::move(options)), cluster_(std::move(cluster)), clock_(std::move(clock)) {
  if (!clock_.now) clock_.now = now_s;
  const auto& nodes = cluster_.nodes();
  if (options_.spares >= int(nodes.size()))
    throw std::runtime_error(fmt::format("htrun: {} spare(s) leave no node to run on ({} in all)", options_.spares,
                                         nodes.size()));
  const std::size_t used = nodes.size() - std::size_t(options_.spares);
  active_.assign(nodes.begin(), nodes.begin() + std::ptrdiff_t(used));
  spares_.assign(nodes.begin() + std::ptrdiff_t(used), nodes.end());
}

void Supervisor::sleep(double seconds) const {
  if (clock_.sleep) clock_.sleep(seconds);
  else sleep_s(seconds);
}

std::string Supervisor::node_name(int id) const {
  for (const Node& n : cluster_.nodes())
    if (n.id == id) return cluster_.name(n);
  return fmt::format("node {}", id);
}

std::vector<std::string> Supervisor::job_command(const std::vector<std::string>& env) const {
  std::vector<std::string> program = options_.program;
  program.insert(program.end(), {"--run-dir", options_.run_dir, "--resume", "auto"});
  return cluster_.job_command(active_, options_.slots, program, options_.launcher_args, env);
}

std::string Supervisor::plan() const {
  std::string out = fmt::format("nodes: {}; {} active, {} spare, {} slot(s) per node\njob: {}\n", cluster_.describe(),
                                active_.size(), spares_.size(), options_.slots, fmt::join(job_command(), " "));
  std::vector<std::string> check{options_.health_tool, "--node", "N", "..."};
  check.insert(check.end(), options_.health_args.begin(), options_.health_args.end());
  for (const Node& n : cluster_.nodes()) {
    check[2] = std::to_string(n.id);
    out += fmt::format("health of {}: {}\n", cluster_.name(n),
                       fmt::join(cluster_.on_node(n, check, options_.launcher_args, options_.connect_timeout_s), " "));
  }
  return out;
}

// What one launch's watch carries from one poll to the next.
struct Supervisor::WatchState {
  Watch w;
  Placement placed;
  int ranks = 0;               // every rank of the launch
  bool all_started = false;    // every rank got past start-up
  double beat_interval_s = 0;  // the ranks' beat interval, as seen: the shortest gap between two beats
  std::optional<double> comm_failure_at;  // when the watch read the first record of a communication failure
  MetricsTail metrics;
  std::int64_t epoch = 0;
  std::unique_ptr<HostProbe> probe;  // the active hosts' reachability, if watched

  WatchState(const std::string& run_dir, std::int64_t launch_epoch) : metrics(run_dir), epoch(launch_epoch) {}

  // The ranks' own records of this launch (older lines may be read again
  // until the program truncates the file: they are older than the launch).
  void read_records() {
    for (const protocol::MetricsLine& line : metrics.poll()) {
      if (const auto* run = std::get_if<protocol::RunLine>(&line);
          run && run->time_s() >= w.launched_at && protocol::of_launch(run->epoch, epoch)) {
        w.training_began = true;
        w.resumed_from = run->resumed_from;
        w.resume_tier = run->resume_tier;
      }
      if (const auto* step = std::get_if<protocol::StepLine>(&line);
          step && step->time_s() >= w.launched_at && protocol::of_launch(step->epoch, epoch)) {
        w.steps[step->step] = *step;
        w.last_step_done_s = std::max(w.last_step_done_s, step->time_s());
      }
    }
  }
  // New heartbeats: the beat interval and the furthest step completed.
  void take_beats(const std::map<int, protocol::Heartbeat>& beats) {
    for (const auto& [rank, h] : beats) {
      const auto it = w.beats.find(rank);
      if (it != w.beats.end() && h.time_s() > it->second.time_s())
        beat_interval_s = beat_interval_s > 0 ? std::min(beat_interval_s, h.time_s() - it->second.time_s())
                                              : h.time_s() - it->second.time_s();
      w.beats[rank] = h;
    }
    read_records();
    for (const auto& [rank, h] : beats) {
      const std::int64_t done = protocol::completed_step(h.step, h.phase);
      if (done > w.reached) {
        if (w.first_step < 0) w.first_step = done;
        w.reached = done;
      }
    }
  }
  // The watch found `f`: the launch ends for it.
  void declare(const Finding& f) {
    w.kind = f.kind;
    w.failed_rank = f.rank;
    w.failed_at = f.failed_at;
    w.message = f.message;
  }
};

std::unique_ptr<ChildProcess> Supervisor::start_launch(int launch, std::int64_t resume_step) {
  // A new epoch: the ranks of every earlier launch (any left on a host that
  // was cut off) fence themselves, and their records are ignored.
  epoch_ = std::max(epoch_, read_launch_epoch(options_.run_dir)) + 1;
  write_launch_epoch(options_.run_dir, epoch_);
  clear_rank_files(options_.run_dir);  // an earlier launch's would mislead
  std::vector<int> ids;
  for (const Node& n : active_) ids.push_back(n.id);
  std::fprintf(stderr, "htrun: launch %d: %zu node(s) [%s] x %d slot(s), resuming after step %lld\n", launch,
               active_.size(), fmt::format("{}", fmt::join(ids, ",")).c_str(), options_.slots, (long long)resume_step);
  // Simulated nodes tell their ranks which node they are on: the memory
  // tiers of checkpoints keep each node's snapshots apart.
  std::vector<std::string> env = cluster_.job_env();
  // A collective that cannot complete (a peer cut off) must fail by name in
  // the ranks before htrun takes it for a hang: the ranks' timeout is two
  // thirds of htrun's, unless the user set one.
  if (!std::getenv("HT_COMM_TIMEOUT")) env.push_back(fmt::format("HT_COMM_TIMEOUT={:g}", comm_timeout_s()));
  env.push_back(fmt::format("HT_LAUNCH_EPOCH={}", epoch_));
  if (cluster_.kind() == ClusterKind::kLocal)
    env.push_back(fmt::format("HT_SIMULATED_NODES={}:{}", options_.slots, fmt::join(ids, ",")));
  return std::make_unique<ChildProcess>(job_command(env), env, (fs::path(options_.run_dir) / "htrun_job.log").string(),
                                        /*echo=*/true,
                                        [this](const std::string& line) { return cluster_.launcher_event(line); });
}

std::unique_ptr<HostProbe> Supervisor::start_probe() const {
  const int port = options_.probe_port >= 0 ? options_.probe_port : cluster_.probe_port();
  if (port == 0 || active_.size() < 2) return nullptr;
  std::vector<std::string> hosts;
  for (const Node& n : active_) hosts.push_back(n.host);
  auto probe = std::make_unique<HostProbe>(hosts, port);
  for (const std::string& host : probe->unresolved())
    std::fprintf(stderr, "htrun: warning: the name %s does not resolve here: it is not probed\n", host.c_str());
  return probe;
}

Watch Supervisor::launch_and_watch(int launch, std::int64_t resume_step) {
  std::unique_ptr<ChildProcess> job = start_launch(launch, resume_step);
  WatchState s(options_.run_dir, epoch_);
  s.w.resume_step = s.w.reached = resume_step;
  s.w.launched_at = now();
  s.placed = placement();
  s.ranks = int(active_.size()) * options_.slots;
  s.probe = start_probe();
  while (!poll_launch(*job, s)) {
  }
  conclude_watch(*job, s);
  return s.w;
}

void Supervisor::pass_on_preemption(ChildProcess& job, const std::map<int, protocol::Heartbeat>& beats, Watch& w) {
  // SIGUSR1 to the ranks themselves (a launcher would kill them on TERM):
  // they finish the step, save a checkpoint and exit; then the job ends.
  w.kind = IncidentKind::kPreemption;
  for (const auto& [rank, h] : beats)
    if (h.pid > 0 && cluster_.kind() == ClusterKind::kLocal) ::kill(h.pid, SIGUSR1);
  if (cluster_.kind() != ClusterKind::kLocal) job.signal(SIGUSR1);
  const double deadline = now() + std::max(options_.grace_s, 60.0);
  while (!job.poll() && now() < deadline) sleep(0.05);
  job.stop(options_.grace_s);
  w.detected_at = w.failed_at = now();
}

bool Supervisor::poll_launch(ChildProcess& job, WatchState& s) {
  Watch& w = s.w;
  sleep(0.1);
  poll_readmissions();
  const auto beats = read_heartbeats(options_.run_dir, epoch_);
  s.take_beats(beats);
  if (g_stop_signal) {
    pass_on_preemption(job, beats, w);
    return true;
  }
  // Ends the launch now: found at `at`. Ranks that lost a host cannot
  // finish anything with it (a TERM, taken for a preemption, would only
  // have them try to save with a peer gone), and the launcher cannot
  // reach it to end its daemon there: they are killed at once.
  const auto end_now = [&](double at, bool host_lost = false) {
    w.detected_at = at;
    job.stop(host_lost ? 0 : options_.grace_s);
    return true;
  };
  if (job.poll()) {
    w.detected_at = now();
    return true;
  }
  // A rank killed by a signal, or a host lost: the launcher may take a
  // while to end the others (srun waits KillWait for ranks stuck in a
  // collective; mpirun cannot reach a host that is gone), so stop the job
  // now.
  const bool lost = !job.lost_host().host.empty();
  if (job.dead_rank().rank >= 0 || lost) return end_now(now(), lost);
  const double t = now();
  // A host gone silent while the other nodes' ranks beat on (once every
  // rank has started: a start is the start timeout's).
  if (s.all_started)
    if (const auto silent = silent_host(beats, s.placed, t, s.beat_interval_s)) {
      s.declare(*silent);
      return end_now(t, /*host_lost=*/true);
    }
  // A host whose daemon's port refuses htrun's probes and whose ranks went
  // silent: its processes died (a launcher may say nothing of it: srun
  // does not when a node's slurmd dies with its ranks). A host that
  // stopped answering them while the others answer: cut off (its ranks are
  // blocked in a collective, or will be).
  if (s.probe) {
    s.probe->poll(t);
    const std::vector<ProbeState> probes = s.probe->states();
    if (s.all_started)
      if (const auto down = host_down(probes, beats, s.placed, t, s.beat_interval_s)) {
        s.declare(*down);
        return end_now(t, /*host_lost=*/true);
      }
    if (const auto cut = unreachable_host(probes, s.placed, t, options_.unreachable_after_s)) {
      s.declare(*cut);
      return end_now(t, /*host_lost=*/true);
    }
  }
  // A hang: progress stalled for the timeout.
  if (const auto hung = hang(beats, t, w.last_step_done_s, options_.hang_timeout_s)) s.declare(*hung);
  if (!s.all_started) check_start(beats, s, t);
  if (w.kind == IncidentKind::kHang || w.kind == IncidentKind::kNoHeartbeat) return end_now(now());
  // A rank's collective timed out and it named the peer: end the launch
  // once its peers had a moment to say theirs (classify reads them all).
  if (!s.comm_failure_at) {
    if (comm_failure_recorded(read_exit_records(options_.run_dir, epoch_))) s.comm_failure_at = now();
  } else if (now() - *s.comm_failure_at >= kCommFailureSettleS) {
    return end_now(*s.comm_failure_at);
  }
  return false;
}

void Supervisor::check_start(const std::map<int, protocol::Heartbeat>& beats, WatchState& s, double t) {
  // A start that never ends: a rank that never arrived (no heartbeat: it
  // is stuck before MPI is up, and so are its peers) or never got past
  // start-up. The hang check cannot see either.
  const int laggard = start_laggard(beats, s.ranks);
  s.all_started = laggard < 0;
  const bool timed_out = options_.start_timeout_s > 0 && t - s.w.launched_at > options_.start_timeout_s;
  if (s.all_started || !timed_out) return;
  // Heartbeats are sampled: a short launch can start, train and save
  // between two beats. What the ranks recorded tells that it started:
  // training began (every rank is past start-up then: building the engine
  // is collective), a step completed, a checkpoint was committed, or a rank
  // wrote its exit record.
  s.all_started = s.w.training_began || !s.w.steps.empty() || !read_exit_records(options_.run_dir, epoch_).empty() ||
                  latest_checkpoint_step(options_.run_dir) > s.w.resume_step;
  if (!s.all_started)
    s.declare(start_not_finished(beats, laggard, s.w.launched_at, options_.start_timeout_s,
                                 options_.program.empty() ? std::string("the program") : options_.program.front(),
                                 options_.run_dir));
}

void Supervisor::conclude_watch(ChildProcess& job, WatchState& s) {
  Watch& w = s.w;
  // Heartbeats are sampled: the step records, the exit records and the
  // checkpoints may know of later steps.
  job.finish();  // every line read: the launcher's report of a dead rank may be in the last ones
  s.read_records();
  if (!w.steps.empty()) {
    w.reached = std::max(w.reached, w.steps.rbegin()->second.step);
    if (w.first_step < 0) w.first_step = w.steps.begin()->first;
  }
  w.exits = read_exit_records(options_.run_dir, epoch_);
  w.checkpoint_step = latest_checkpoint_step(options_.run_dir);
  for (const protocol::ExitRecord& e : w.exits)
    w.reached = std::max(w.reached, protocol::completed_step(e.step, e.phase));
  w.reached = std::max(w.reached, w.checkpoint_step);
  w.exit_code = job.exit_code();
  w.dead_rank = job.dead_rank();
  w.lost_host = job.lost_host();
  for (const auto& [rank, h] : read_heartbeats(options_.run_dir, epoch_)) w.beats[rank] = h;
  // A launch that failed with nothing said: ranks that still beat after
  // the launcher is gone are on a host it could not reach to end them (cut
  // off from it), which is the culprit. A beat or two tells.
  if (!w.kind && job.exit_code() != 0 && w.dead_rank.rank < 0 && w.lost_host.host.empty() && w.exits.empty() &&
      s.beat_interval_s > 0) {
    const double ended_at = now(), until = ended_at + std::min(5.0, 2.5 * s.beat_interval_s);
    while (w.orphans.empty() && now() < until) {
      sleep(0.05);
      for (const auto& [rank, h] : read_heartbeats(options_.run_dir, epoch_))
        if (h.time_s() > ended_at && std::count(w.orphans.begin(), w.orphans.end(), rank) == 0) {
          w.orphans.push_back(rank);
          w.beats[rank] = h;
        }
    }
  }
}

std::unique_ptr<ChildProcess> Supervisor::start_health_check(const Node& node) const {
  std::vector<std::string> check{options_.health_tool, "--node", std::to_string(node.id), "--checks",
                                 "compute,memory,disk", "--ckpt-dir",
                                 (fs::path(options_.run_dir) / "checkpoints").string()};
  check.insert(check.end(), options_.health_args.begin(), options_.health_args.end());
  return std::make_unique<ChildProcess>(cluster_.on_node(node, check, options_.launcher_args, options_.connect_timeout_s),
                               std::vector<std::string>{},
                               (fs::path(options_.run_dir) / fmt::format("health_node{}.txt", node.id)).string(),
                               /*echo=*/false);
}

std::vector<bool> Supervisor::nodes_healthy(const std::vector<Node>& nodes) {
  // Every node at once, each under the health timeout: the checks of a
  // dead or cut-off host are mostly waiting for a connection, and one after
  // another they would add up.
  std::vector<std::unique_ptr<ChildProcess>> jobs;
  for (const Node& node : nodes) jobs.push_back(start_health_check(node));
  const double deadline = now() + options_.health_timeout_s;
  std::vector<bool> healthy;
  for (auto& job : jobs) healthy.push_back(job->wait(std::max(0.0, deadline - now()), options_.grace_s) == 0);
  return healthy;
}

void Supervisor::poll_readmissions() {
  if (!options_.health) return;
  for (const Node& n : nodes_to_readmit(cordoned_, now(), options_.readmit_after_s))
    if (!readmit_checks_.count(n.id) && now() >= cordoned(n.id)->retry_at)
      readmit_checks_[n.id] = {start_health_check(n), now()};
  for (auto it = readmit_checks_.begin(); it != readmit_checks_.end();) {
    auto& [job, started_at] = it->second;
    const bool over_time = now() - started_at > options_.health_timeout_s;
    if (!job->poll() && !over_time) {
      ++it;
      continue;
    }
    if (over_time) job->stop(options_.grace_s);
    const int id = it->first;
    const int code = over_time ? -1 : job->exit_code();
    const bool ok = code == 0;
    it = readmit_checks_.erase(it);  // `job` is gone from here on
    Cordoned* c = cordoned(id);
    if (!c) continue;  // readmitted meanwhile
    if (ok) {
      readmit(Node(c->node));  // a copy: readmit removes it from cordoned_
      continue;
    }
    std::fprintf(stderr, "htrun: %s is not back yet (its health check %s); next look in %g s\n",
                 cluster_.name(c->node).c_str(), over_time ? "took too long" : fmt::format("exited {}", code).c_str(),
                 options_.readmit_after_s);
    c->retry_at = now() + options_.readmit_after_s;
  }
}

Cordoned* Supervisor::cordoned(int id) {
  const auto it = std::find_if(cordoned_.begin(), cordoned_.end(), [&](const Cordoned& c) { return c.node.id == id; });
  return it == cordoned_.end() ? nullptr : &*it;
}

void Supervisor::end_old_ranks(const Node& node) {
  const auto it = rank_pids_.find(node.host);
  if (node.host.empty() || it == rank_pids_.end()) return;
  // Only a process whose command line holds the run directory is ended: a
  // pid may have been reused by then.
  std::string pids;
  for (int pid : it->second) pids += fmt::format(" {}", pid);
  const std::vector<std::string> command{
      "sh", "-c",
      "for p in" + pids + "; do grep -qaF -- \"$1\" /proc/$p/cmdline 2>/dev/null && kill -KILL $p && echo \"ended $p\"; done; true",
      "sh", options_.run_dir};
  ChildProcess job(cluster_.on_node(node, command, options_.launcher_args, options_.connect_timeout_s), {},
          (fs::path(options_.run_dir) / fmt::format("old_ranks_node{}.txt", node.id)).string(), /*echo=*/false);
  if (job.wait(options_.health_timeout_s, options_.grace_s) == 0) rank_pids_.erase(it);
}

void Supervisor::readmit(const Node& node) {
  end_old_ranks(node);
  std::erase_if(cordoned_, [&](const Cordoned& c) { return c.node.id == node.id; });
  spares_.push_back(node);
  readmitted_.push_back(node.id);
  std::fprintf(stderr, "htrun: %s passed its health check again: back as a spare\n", cluster_.name(node).c_str());
}

bool Supervisor::replace_bad_nodes(Incident& incident, Report& report) {
  const std::vector<Node> suspects = nodes_to_check(incident, active_);
  const bool cordon_anyway = cordon_even_if_healthy(incident);
  // Cordoned nodes due for another look are checked in the same batch: a
  // node back in shape can replace the one failing now. (The watch checks
  // them while the job runs, too; a check of it still running is dropped.)
  const std::vector<Node> candidates = nodes_to_readmit(cordoned_, now(), options_.readmit_after_s);
  for (const Node& n : candidates) readmit_checks_.erase(n.id);
  const bool unchecked = options_.health && cordon_unchecked(incident, !spares_.empty());
  std::vector<Node> checked;
  for (const Node& n : suspects)
    if (!unchecked || n.id != incident.node) checked.push_back(n);
  const std::size_t suspects_checked = checked.size();
  checked.insert(checked.end(), candidates.begin(), candidates.end());
  const std::vector<bool> results = options_.health ? nodes_healthy(checked) : std::vector<bool>(checked.size(), true);
  for (std::size_t k = 0; k < candidates.size(); ++k)
    if (results[suspects_checked + k]) readmit(candidates[k]);
  for (std::size_t k = 0, next = 0; k < suspects.size(); ++k) {
    const Node& node = suspects[k];
    const bool skipped = unchecked && node.id == incident.node;
    const bool ok = !skipped && results[next++];
    incident.health.push_back({.node = node.id, .host = node.host, .healthy = ok, .checked = !skipped});
    if (ok && !cordon_anyway) continue;
    const std::string why = ok        ? "a persistent straggler"
                            : skipped ? "was lost"
                                      : "failed its health check";
    cordoned_.push_back({.node = node, .at = now()});
    // A simulated node's memory goes with it, as a real node's would: its
    // ranks' snapshots then come from their peers' replicas.
    if (cluster_.kind() == ClusterKind::kLocal) {
      std::error_code ignored;
      fs::remove_all(fs::path(memory_dir()) / fmt::format("node{}", node.id), ignored);
    }
    if (const std::string warning = cluster_.cordon(node, why); !warning.empty())
      std::fprintf(stderr, "htrun: warning: %s\n", warning.c_str());
    auto it = std::find_if(active_.begin(), active_.end(), [&](const Node& n) { return n.id == node.id; });
    if (!spares_.empty()) {
      std::fprintf(stderr, "htrun: %s %s: cordoned, spare %s brought in\n", cluster_.name(node).c_str(), why.c_str(),
                   cluster_.name(spares_.front()).c_str());
      *it = spares_.front();
      spares_.erase(spares_.begin());
    } else if (options_.allow_shrink && active_.size() > 1) {
      std::fprintf(stderr, "htrun: %s %s: cordoned; no spare, continuing on %zu node(s)\n",
                   cluster_.name(node).c_str(), why.c_str(), active_.size() - 1);
      active_.erase(it);
    } else {
      report.verdict = fmt::format("{} {} and no spare is left (use --spares or --allow-shrink)",
                                   cluster_.name(node), why);
      return false;
    }
  }
  // Ranks fill the nodes in the cluster's own order (Slurm places a step's
  // tasks that way), so a brought-in spare takes its place in that order.
  std::sort(active_.begin(), active_.end(), [](const Node& a, const Node& b) { return a.id < b.id; });
  return true;
}

void Supervisor::record_launch(const Watch& w, Report& report, std::optional<Incident>& pending,
                               std::map<std::int64_t, protocol::StepLine>& completed) {
  for (const auto& [rank, beat] : w.beats)
    if (!beat.host.empty() && beat.pid > 0) rank_pids_[beat.host].insert(beat.pid);
  if (pending) {
    // The relaunch says where it resumed (its run line): the steps lost
    // are those past that step, whichever tier held it.
    if (!w.resume_tier.empty()) {
      pending->resumed_from = w.resumed_from;
      pending->resume_tier = w.resume_tier;
      pending->steps_lost = std::max<std::int64_t>(0, pending->step_reached - w.resumed_from);
    }
    report.incidents.push_back(*pending);
    pending.reset();
  }
  // Recovery: from an incident's detection to the first step completed
  // after it, whichever launch completed it.
  if (!w.steps.empty()) {
    double first_done_s = w.steps.begin()->second.time_s();
    for (const auto& [step, m] : w.steps) first_done_s = std::min(first_done_s, m.time_s());
    for (Incident& i : report.incidents)
      if (!i.recovery_s && first_done_s >= i.detected_at) i.recovery_s = first_done_s - i.detected_at;
  }
  for (const auto& [step, m] : w.steps) completed[step] = m;
}

Incident Supervisor::classify_launch(const Watch& w, double wall_start) const {
  Incident incident =
      classify(w, placement(), comm_timeout_s(), (fs::path(options_.run_dir) / "htrun_job.log").string());
  incident.time_s = incident.detected_at - wall_start;
  const char* kind = protocol::incident_kind_name(incident.kind);
  const std::string who = incident.rank >= 0 ? fmt::format("rank {} ({})", incident.rank, node_name(incident.node))
                          : incident.kind == IncidentKind::kPreemption ? "every rank"
                                                                       : "an unknown rank";
  std::fprintf(stderr, "htrun: %s of %s detected after %.2f s; the job reached step %lld%s\n", kind, who.c_str(),
               incident.detection_latency_s, (long long)incident.step_reached,
               incident.message.empty() ? "" : (": " + incident.message).c_str());
  return incident;
}

std::optional<std::pair<int, std::string>> Supervisor::not_retried(const Incident& incident, const Watch& w,
                                                                   int& last_early_failure_code) const {
  // A preemption (of htrun, or of the ranks by someone else: Slurm
  // signals the tasks) saved and stopped: so does the job.
  if (incident.kind == IncidentKind::kPreemption) return {{kSupervisorPreempted, preemption_verdict(w)}};
  if (incident.kind == IncidentKind::kError)
    return {{kSupervisorNotRetried, "the program failed on its input (exit record kind 'error'); not retried"}};
  // A program that never beat cannot be watched: relaunching cannot help.
  if (incident.kind == IncidentKind::kNoHeartbeat)
    return {{kSupervisorNotRetried,
             "the program wrote no heartbeat, so htrun cannot watch it (see docs/htrun.md); not retried"}};
  // The program failing the same way before any training, with nothing
  // said (a usage error, a missing file), will fail again: stop.
  const bool early_failure = failed_before_training(w);
  if (early_failure && w.exit_code == last_early_failure_code)
    return {{kSupervisorNotRetried,
             fmt::format("the program failed before training twice in a row (exit {}); see {}", w.exit_code,
                         (fs::path(options_.run_dir) / "htrun_job.log").string())}};
  last_early_failure_code = early_failure ? w.exit_code : -1;
  return std::nullopt;
}

bool Supervisor::wait_to_relaunch(const Incident& incident, const Watch& w, std::int64_t resume_step,
                                  int& failures_in_a_row) {
  // No back-off after a launch that trained past its checkpoint: the
  // failure is the job's, not a loop. Then it doubles with each failure
  // in a row that made no progress. It runs from the detection: the
  // health checks count towards it.
  failures_in_a_row = htrun::failures_in_a_row(failures_in_a_row, w.reached, resume_step);
  const double relaunch_at = incident.detected_at + backoff_s(failures_in_a_row, options_.backoff_s);
  while (now() < relaunch_at && !g_stop_signal) sleep(0.05);
  return !g_stop_signal;
}

void Supervisor::finish_report(Report& report, double wall_start,
                               const std::map<std::int64_t, protocol::StepLine>& completed) {
  report.wall_s = now() - wall_start;
  for (const auto& [step, m] : completed) report.productive_s += m.step_ms / 1000;
  for (const Cordoned& c : cordoned_) report.cordoned.push_back(c.node.id);
  for (const Node& n : active_) report.active.push_back(n.id);
  for (const Node& n : spares_) report.spares_left.push_back(n.id);
  report.readmitted = readmitted_;
  std::ofstream(fs::path(options_.run_dir) / "htrun_report.json") << report.to_json().dump(1) << "\n";
  // Simulated nodes' memory is this machine's: the run is over, free it
  // (the checkpoints on disk stay). A program finishing frees its own.
  if (cluster_.kind() == ClusterKind::kLocal) {
    std::error_code ignored;
    fs::remove_all(memory_dir(), ignored);
  }
}

Report Supervisor::run() {
  fs::create_directories(options_.run_dir);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  Report report;
  const double wall_start = now();
  std::optional<Incident> pending;  // the last incident, until the relaunch
  // Every step completed under htrun, the last time it completed: a step
  // redone after a resume counts once.
  std::map<std::int64_t, protocol::StepLine> completed;
  int failures_in_a_row = 0;
  int last_early_failure_code = -1;
  for (;;) {
    const std::int64_t resume_step = latest_checkpoint_step(options_.run_dir);
    const Watch w = launch_and_watch(report.restarts + 1, resume_step);
    record_launch(w, report, pending, completed);
    if (!w.kind && w.exit_code == 0) {
      report.exit_code = kSupervisorFinished;
      report.verdict = "the job finished";
      break;
    }
    Incident incident = classify_launch(w, wall_start);
    if (const auto stop = not_retried(incident, w, last_early_failure_code)) {
      report.incidents.push_back(incident);
      std::tie(report.exit_code, report.verdict) = *stop;
      break;
    }
    if (!replace_bad_nodes(incident, report)) {
      report.incidents.push_back(incident);
      report.exit_code = kSupervisorGaveUp;
      break;
    }
    if (report.restarts >= options_.max_restarts) {
      report.incidents.push_back(incident);
      report.verdict = fmt::format("gave up after {} restarts", options_.max_restarts);
      report.exit_code = kSupervisorGaveUp;
      break;
    }
    ++report.restarts;
    pending = incident;
    if (!wait_to_relaunch(incident, w, resume_step, failures_in_a_row)) {
      report.incidents.push_back(*pending);
      pending.reset();
      report.exit_code = kSupervisorPreempted;
      report.verdict = fmt::format("stopped by a signal before relaunching; the newest checkpoint is step {}",
                                   latest_checkpoint_step(options_.run_dir));
      break;
    }
  }
  if (pending) report.incidents.push_back(*pending);
  finish_report(report, wall_start, completed);
  return report;
}

}  // namespace htrun
