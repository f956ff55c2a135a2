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
#include "htrun/job.h"
#include "htrun/run_files.h"

namespace fs = std::filesystem;

namespace htrun {
namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_signal(int s) { g_stop_signal = s; }

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

/// Before the first step: MPI coming up ("launch"), or building the model and
/// loading the checkpoint ("start"); the start timeout covers these.
bool starting(const Heartbeat& h) { return h.phase == "launch" || h.phase == "start"; }

/// Whether `a` got less far than `b`: an earlier step, an earlier phase of
/// the step (the trainer's order), or the same place reached earlier.
bool behind(const Heartbeat& a, const Heartbeat& b) {
  static const std::vector<std::string> order{"data",          "forward-backward", "gradient-reduction", "optimizer",
                                              "replica-check", "checkpoint",       "step-done",          "evaluate",
                                              "finish"};
  auto place = [](const Heartbeat& h) {
    const auto it = std::find(order.begin(), order.end(), h.phase);
    return std::make_pair(h.step, it - order.begin());
  };
  if (place(a) != place(b)) return place(a) < place(b);
  return a.progress_s < b.progress_s;
}

}  // namespace

struct Supervisor::Watch {
  // "hang", "preemption" or "no-heartbeat" when the watch itself ended the job
  std::string kind;
  std::string message;
  int failed_rank = -1;
  double failed_at = 0, detected_at = 0;
  int exit_code = 0;
  LauncherEvent dead_rank;  // the launcher's report of a rank killed by a signal (rank -1: none)
  LauncherEvent lost_host;  // the launcher's report of a host lost (host "": none)
  std::map<int, Heartbeat> beats;  // the ranks' last heartbeats
  std::vector<int> orphans;        // ranks that beat on after the launcher was gone
  std::vector<ExitRecord> exits;  // what the ranks said, oldest first
  std::int64_t checkpoint_step = 0;  // the newest committed checkpoint when the launch ended
  std::int64_t resume_step = 0, reached = 0;
  // The first step this launch was seen to complete (a heartbeat or a step
  // record), -1 when none: it trained.
  std::int64_t first_step = -1;
  double launched_at = 0;
  // What rank 0 recorded in metrics.jsonl during this launch: training began
  // (the run line), and each step completed, by step (exact times).
  bool training_began = false;
  std::int64_t resumed_from = -1;  // the run line's: where the launch resumed, and from which tier
  std::string resume_tier;
  std::map<std::int64_t, MetricsRecord> steps;
  double last_step_done_s = 0;  // when the newest of them completed
};

double Supervisor::comm_timeout_s() const { return std::max(1.0, options_.hang_timeout_s * 2.0 / 3.0); }

std::string Supervisor::memory_dir() const {
  return ht::ckpt::default_memory_dir((fs::path(options_.run_dir) / "checkpoints").string());
}

Supervisor::Supervisor(SupervisorOptions options, Cluster cluster)
    : options_(std::move(options)), cluster_(std::move(cluster)) {
  const auto& nodes = cluster_.nodes();
  if (options_.spares >= int(nodes.size()))
    throw std::runtime_error(fmt::format("htrun: {} spare(s) leave no node to run on ({} in all)", options_.spares,
                                         nodes.size()));
  const std::size_t used = nodes.size() - std::size_t(options_.spares);
  active_.assign(nodes.begin(), nodes.begin() + std::ptrdiff_t(used));
  spares_.assign(nodes.begin() + std::ptrdiff_t(used), nodes.end());
}

std::string Supervisor::node_name(int id) const {
  for (const Node& n : cluster_.nodes())
    if (n.id == id) return cluster_.name(n);
  return fmt::format("node {}", id);
}

std::vector<std::string> Supervisor::job_command() const {
  std::vector<std::string> program = options_.program;
  program.insert(program.end(), {"--run-dir", options_.run_dir, "--resume", "auto"});
  return cluster_.job_command(active_, options_.slots, program, options_.launcher_args);
}

std::string Supervisor::plan() const {
  std::string out = fmt::format("nodes: {}; {} active, {} spare, {} slot(s) per node\njob: {}\n", cluster_.describe(),
                                active_.size(), spares_.size(), options_.slots, fmt::join(job_command(), " "));
  for (const Node& n : cluster_.nodes())
    out += fmt::format("health of {}: {}\n", cluster_.name(n),
                       fmt::join(cluster_.on_node(n, {options_.health_tool, "--node", std::to_string(n.id), "..."},
                                                 options_.launcher_args, options_.connect_timeout_s),
                                 " "));
  return out;
}

// Says whether the ranks' save on preemption left a newer checkpoint than
// the launch started from: a rerun resumes from the newest either way.
std::string Supervisor::preemption_verdict(const Watch& w) const {
  const std::int64_t newest = w.checkpoint_step;
  if (newest > w.resume_step || (newest == w.reached && newest > 0))
    return fmt::format("preempted: checkpoint of step {} saved, stopped", newest);
  return fmt::format("preempted: no new checkpoint (the newest is step {}; the job had reached step {}), stopped",
                     newest, w.reached);
}

Supervisor::Watch Supervisor::launch_and_watch(int launch, std::int64_t resume_step) {
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
  Job job(job_command(), env, (fs::path(options_.run_dir) / "htrun_job.log").string(), /*echo=*/true,
          [this](const std::string& line) { return cluster_.launcher_event(line); });

  Watch w;
  w.resume_step = w.reached = resume_step;
  const double launched_at = w.launched_at = now_s();
  const int ranks = int(active_.size()) * options_.slots;
  bool all_started = false;
  double beat_interval_s = 0;
  MetricsTail metrics(options_.run_dir);
  // The ranks' own records of this launch (older lines may be read again
  // until the program truncates the file: they are older than the launch).
  auto read_records = [&] {
    for (const MetricsRecord& m : metrics.poll()) {
      if (m.time_s < launched_at || (m.epoch != 0 && m.epoch != epoch_)) continue;
      if (m.type == "run") {
        w.training_began = true;
        w.resumed_from = m.resumed_from;
        w.resume_tier = m.resume_tier;
      }
      if (m.type != "step") continue;
      w.steps[m.step] = m;
      w.last_step_done_s = std::max(w.last_step_done_s, m.time_s);
    }
  };
  for (;;) {
    sleep_s(0.1);
    const auto beats = read_heartbeats(options_.run_dir, epoch_);
    for (const auto& [rank, h] : beats) {
      // The ranks' beat interval, as seen: the shortest gap between two beats.
      const auto it = w.beats.find(rank);
      if (it != w.beats.end() && h.time_s > it->second.time_s)
        beat_interval_s = beat_interval_s > 0 ? std::min(beat_interval_s, h.time_s - it->second.time_s)
                                              : h.time_s - it->second.time_s;
      w.beats[rank] = h;
    }
    read_records();
    for (const auto& [rank, h] : beats) {
      const std::int64_t done = completed_step(h.step, h.phase);
      if (done > w.reached) {
        if (w.first_step < 0) w.first_step = done;
        w.reached = done;
      }
    }
    if (g_stop_signal) {
      // Pass the preemption on to the ranks themselves (SIGUSR1: a launcher
      // would kill them on TERM): they finish the step, save a checkpoint
      // and exit; then the job ends.
      w.kind = "preemption";
      for (const auto& [rank, h] : beats)
        if (h.pid > 0 && cluster_.kind() == ClusterKind::kLocal) ::kill(h.pid, SIGUSR1);
      if (cluster_.kind() != ClusterKind::kLocal) job.signal(SIGUSR1);
      const double deadline = now_s() + std::max(options_.grace_s, 60.0);
      while (!job.poll() && now_s() < deadline) sleep_s(0.05);
      job.stop(options_.grace_s);
      w.detected_at = w.failed_at = now_s();
      break;
    }
    if (job.poll()) {
      w.detected_at = now_s();
      break;
    }
    // A rank killed by a signal, or a host lost: the launcher may take a
    // while to end the others (srun waits KillWait for ranks stuck in a
    // collective; mpirun cannot reach a host that is gone), so stop the job
    // now.
    if (job.dead_rank().rank >= 0 || !job.lost_host().host.empty()) {
      w.detected_at = now_s();
      job.stop(options_.grace_s);
      break;
    }
    // A host gone silent: every rank on it stopped beating while the other
    // nodes' ranks beat on (a host that died with its processes, or lost
    // the shared run directory). Many beats of margin, at least two seconds:
    // a busy host may write late, and a false alarm costs a restart.
    if (all_started && beat_interval_s > 0) {
      const double silence = std::max(2.0, 10 * beat_interval_s), now = now_s();
      std::map<int, double> newest;
      for (const auto& [rank, h] : beats)
        if (const int n = node_of_rank(rank); n >= 0) newest[n] = std::max(newest[n], h.time_s);
      for (const auto& [n, t] : newest)
        if (now - t > silence &&
            std::any_of(newest.begin(), newest.end(), [&](const auto& o) { return now - o.second < silence / 4; })) {
          w.kind = "host-lost";
          w.failed_rank = n * options_.slots;
          w.failed_at = t;
          w.message = fmt::format("every rank on {} stopped beating {:.1f} s ago while the others beat on",
                                  cluster_.name(active_[std::size_t(n)]), now - t);
          break;
        }
      if (w.kind == "host-lost") {
        w.detected_at = now;
        job.stop(options_.grace_s);
        break;
      }
    }
    // A hang: progress stalled for the timeout. Peers go on until they
    // block on the hung rank, so the rank that got least far is named (then
    // the one that stopped first).
    // A step completed is progress of every rank (none completes a step
    // alone): heartbeats are sampled, the step records are not.
    const Heartbeat* hung = nullptr;
    for (const auto& [rank, h] : beats)
      if (!starting(h) && now_s() - std::max(h.progress_s, w.last_step_done_s) > options_.hang_timeout_s &&
          (!hung || behind(h, *hung)))
        hung = &h;
    if (hung) {
      w.kind = "hang";
      w.failed_rank = hung->rank;
      w.failed_at = hung->progress_s;
    }
    // A start that never ends: a rank that never arrived (no heartbeat: it
    // is stuck before MPI is up, and so are its peers) or never got past
    // start-up. The hang check above cannot see either.
    if (!all_started) {
      // The laggard: a rank with no heartbeat first, then one whose MPI is
      // not up (both may be waiting for the first), then one still starting.
      int laggard = -1;
      for (int r = 0; r < ranks && laggard < 0; ++r)
        if (!beats.count(r)) laggard = r;
      for (const char* phase : {"launch", "start"})
        for (int r = 0; r < ranks && laggard < 0; ++r)
          if (beats.at(r).phase == phase) laggard = r;
      all_started = laggard < 0;
      // Heartbeats are sampled: a short launch can start, train and save
      // between two beats. What the ranks recorded tells that it started:
      // training began (every rank is past start-up then: building the
      // engine is collective), a step completed, a checkpoint was committed,
      // or a rank wrote its exit record.
      if (!all_started && options_.start_timeout_s > 0 && now_s() - launched_at > options_.start_timeout_s)
        all_started = w.training_began || !w.steps.empty() || !read_exit_records(options_.run_dir, epoch_).empty() ||
                      latest_checkpoint_step(options_.run_dir) > resume_step;
      if (!all_started && options_.start_timeout_s > 0 && now_s() - launched_at > options_.start_timeout_s) {
        w.kind = "hang";
        w.failed_rank = laggard;
        w.failed_at = launched_at + options_.start_timeout_s;
        w.message = fmt::format("rank {} did not {} within the start timeout ({:g} s)", laggard,
                                beats.count(laggard) ? "finish starting" : "start", options_.start_timeout_s);
        // Not one heartbeat from any rank: the program does not keep the
        // contract (a program on ht::train::Job beats from its first moment).
        if (beats.empty()) {
          w.kind = "no-heartbeat";
          w.failed_rank = -1;
          w.message = fmt::format(
              "no rank wrote a heartbeat within the start timeout ({:g} s): '{}' does not keep htrun's contract "
              "(heartbeats in {}/heartbeat/rank_R.json; programs built on ht::train::Job keep it; see docs/htrun.md)",
              options_.start_timeout_s, options_.program.empty() ? std::string("the program") : options_.program.front(),
              options_.run_dir);
        }
      }
    }
    if (w.kind == "hang" || w.kind == "no-heartbeat") {
      w.detected_at = now_s();
      job.stop(options_.grace_s);
      break;
    }
  }
  // Heartbeats are sampled: the step records, the exit records and the
  // checkpoints may know of later steps.
  job.finish();  // every line read: the launcher's report of a dead rank may be in the last ones
  read_records();
  if (!w.steps.empty()) {
    const MetricsRecord& last = w.steps.rbegin()->second;
    w.reached = std::max(w.reached, last.step);
    if (w.first_step < 0) w.first_step = w.steps.begin()->first;
  }
  w.exits = read_exit_records(options_.run_dir, epoch_);
  w.checkpoint_step = latest_checkpoint_step(options_.run_dir);
  for (const ExitRecord& e : w.exits) w.reached = std::max(w.reached, completed_step(e.step, e.phase));
  w.reached = std::max(w.reached, w.checkpoint_step);
  w.exit_code = job.exit_code();
  w.dead_rank = job.dead_rank();
  w.lost_host = job.lost_host();
  for (const auto& [rank, h] : read_heartbeats(options_.run_dir, epoch_)) w.beats[rank] = h;
  // A launch that failed with nothing said: ranks that still beat after
  // the launcher is gone are on a host it could not reach to end them (cut
  // off from it), which is the culprit. A beat or two tells.
  if (w.kind.empty() && job.exit_code() != 0 && w.dead_rank.rank < 0 && w.lost_host.host.empty() && w.exits.empty() &&
      beat_interval_s > 0) {
    const double ended_at = now_s(), until = ended_at + std::min(5.0, 2.5 * beat_interval_s);
    while (w.orphans.empty() && now_s() < until) {
      sleep_s(0.05);
      for (const auto& [rank, h] : read_heartbeats(options_.run_dir, epoch_))
        if (h.time_s > ended_at && std::count(w.orphans.begin(), w.orphans.end(), rank) == 0) {
          w.orphans.push_back(rank);
          w.beats[rank] = h;
        }
    }
  }
  return w;
}

Incident Supervisor::classify(const Watch& w) {
  Incident i;
  i.kind = w.kind;
  i.message = w.message;
  i.rank = w.failed_rank;
  double failed_at = w.failed_at;
  // What names the culprit, most direct first: the watch itself (a hang, a
  // preemption); a rank's own record of its failure (a peer's communication
  // failure is an effect, not the cause); the launcher's report of a rank
  // killed or a host lost; the ranks that communication failures name; the
  // host whose heartbeats stopped first. The rank that got least far is only
  // the hang check's, for a job that stopped moving with every rank alive.
  if (i.kind.empty())
    for (const ExitRecord& e : w.exits) {
      if (e.kind == "comm-failure" || e.kind == "ok") continue;
      i.kind = e.kind;
      i.rank = e.blamed.empty() ? e.rank : e.blamed.front();
      i.message = e.message;
      failed_at = e.time_s;
      break;
    }
  // The launcher's reports: a rank killed, a host lost. A lost host that
  // was reported first and is not the killed rank's is the cause (srun kills
  // the other tasks of a step whose node failed, and says so after).
  const bool lost_first = !w.lost_host.host.empty() &&
                          (w.dead_rank.rank < 0 || (node_of_host(w.lost_host.host) != node_of_rank(w.dead_rank.rank) &&
                                                    w.lost_host.time_s <= w.dead_rank.time_s));
  if (i.kind.empty() && w.dead_rank.rank >= 0 && !lost_first) {
    i.kind = "crash";
    i.rank = w.dead_rank.rank;
    failed_at = last_beat(w, node_of_rank(i.rank), w.dead_rank.time_s);
  }
  if (i.kind.empty() && !w.lost_host.host.empty()) {
    const int node = node_of_host(w.lost_host.host);
    i.kind = "host-lost";
    i.rank = node >= 0 ? node * options_.slots : -1;
    i.message = fmt::format("the launcher lost host {}", w.lost_host.host);
    failed_at = last_beat(w, node, w.lost_host.time_s);
  }
  if (i.kind.empty() && !w.orphans.empty()) {
    // Cut off: its ranks live on, stuck where the cut caught them, so the
    // last change of their step or phase is when it came.
    const int node = node_of_rank(w.orphans.front());
    i.kind = "host-lost";
    i.rank = w.orphans.front();
    i.message = fmt::format("rank(s) {} beat on after the launcher was gone: their host is cut off from it",
                            fmt::join(w.orphans, ","));
    for (int r : w.orphans)
      if (node_of_rank(r) == node) failed_at = std::max(failed_at, w.beats.at(r).progress_s);
  }
  if (i.kind.empty()) {
    // Communication failures: the ranks each record names. A rank named by
    // a rank it did not name itself is the culprit; ranks that name each
    // other (a link cut between them) leave it to the health checks, which
    // check every node they are on.
    std::map<int, std::vector<int>> blames;
    for (const ExitRecord& e : w.exits)
      if (e.kind == "comm-failure") blames[e.rank] = e.blamed;
    std::vector<int> named;
    for (const auto& [rank, blamed] : blames)
      for (int b : blamed) {
        const auto back = blames.find(b);
        const bool mutual = back != blames.end() && std::count(back->second.begin(), back->second.end(), rank) > 0;
        if (!mutual && std::count(named.begin(), named.end(), b) == 0) named.push_back(b);
        if (mutual) i.suspect_nodes.push_back(node_of_rank(b));
      }
    if (!named.empty() || !i.suspect_nodes.empty()) {
      i.kind = "comm-failure";
      i.rank = named.empty() ? -1 : named.front();
      // The rank its peers waited for still beats but made no progress for
      // longer than they waited: it hangs (stuck outside communication),
      // and its peers' timeouts are the effect.
      if (const auto h = w.beats.find(i.rank);
          h != w.beats.end() && h->second.time_s - h->second.progress_s > 0.5 * comm_timeout_s())
        i.kind = "hang";
      const ExitRecord& first = *std::find_if(w.exits.begin(), w.exits.end(),
                                              [](const ExitRecord& e) { return e.kind == "comm-failure"; });
      i.message = first.message;
      failed_at = named.empty() ? first.time_s : last_beat(w, node_of_rank(i.rank), first.time_s);
    }
  }
  if (i.kind.empty()) {
    // Nothing said: the host whose ranks stopped beating well before the
    // others did (a host gone with its processes), if there is one.
    const int stale = stale_node(w);
    i.kind = "failure";  // an exit nobody explained
    if (stale >= 0) {
      i.rank = stale * options_.slots;
      failed_at = last_beat(w, stale, 0);
      i.message = fmt::format("the launcher exited {}; the heartbeats of {} stopped first", w.exit_code,
                              cluster_.name(active_[std::size_t(stale)]));
    } else {
      i.message = fmt::format("the launcher exited {} and no rank said why (see {})", w.exit_code,
                              (fs::path(options_.run_dir) / "htrun_job.log").string());
    }
  }
  if (failed_at == 0) failed_at = w.detected_at;
  const std::size_t node_index = i.rank >= 0 ? std::size_t(i.rank / options_.slots) : active_.size();
  if (node_index < active_.size()) {
    i.node = active_[node_index].id;
    i.host = active_[node_index].host;
  }
  std::vector<int> suspects;
  for (int index : i.suspect_nodes)
    if (index >= 0 && std::count(suspects.begin(), suspects.end(), active_[std::size_t(index)].id) == 0)
      suspects.push_back(active_[std::size_t(index)].id);
  i.suspect_nodes = suspects;
  i.exit_code = w.exit_code;
  i.detected_at = w.detected_at;
  i.failed_at = failed_at;
  i.detection_latency_s = std::max(0.0, w.detected_at - failed_at);
  i.step_reached = w.reached;
  i.steps_lost = std::max<std::int64_t>(0, w.reached - w.checkpoint_step);
  return i;
}

int Supervisor::node_of_rank(int rank) const {
  return rank >= 0 && rank / options_.slots < int(active_.size()) ? rank / options_.slots : -1;
}

int Supervisor::node_of_host(const std::string& host) const {
  for (std::size_t n = 0; n < active_.size(); ++n)
    if (active_[n].host == host || active_[n].host.substr(0, active_[n].host.find('.')) == host) return int(n);
  return -1;
}

double Supervisor::last_beat(const Watch& w, int node, double otherwise) const {
  // The failure came after the node's ranks last beat: the newest of their
  // beats bounds it from below (to within a heartbeat interval).
  double last = 0;
  for (const auto& [rank, h] : w.beats)
    if (node >= 0 && node_of_rank(rank) == node) last = std::max(last, h.time_s);
  return last > 0 ? last : otherwise;
}

int Supervisor::stale_node(const Watch& w) const {
  // Each node's newest beat; the stalest node, if it fell silent more than
  // a second (ten default beats of the tests, half a default beat) before
  // every other node.
  std::map<int, double> newest;
  for (const auto& [rank, h] : w.beats)
    if (const int n = node_of_rank(rank); n >= 0) newest[n] = std::max(newest[n], h.time_s);
  if (newest.size() < 2) return -1;
  int stalest = -1;
  for (const auto& [n, t] : newest)
    if (stalest < 0 || t < newest[stalest]) stalest = n;
  for (const auto& [n, t] : newest)
    if (n != stalest && t - newest[stalest] < 1.0) return -1;
  return stalest;
}

std::vector<bool> Supervisor::nodes_healthy(const std::vector<Node>& nodes) {
  // Every node at once, each under the health timeout: the checks of a
  // dead or cut-off host are mostly waiting for a connection, and one after
  // another they would add up.
  std::vector<std::unique_ptr<Job>> jobs;
  for (const Node& node : nodes) {
    const std::vector<std::string> check{options_.health_tool,
                                         "--node",
                                         std::to_string(node.id),
                                         "--checks",
                                         "compute,memory,disk",
                                         "--ckpt-dir",
                                         (fs::path(options_.run_dir) / "checkpoints").string()};
    jobs.push_back(std::make_unique<Job>(
        cluster_.on_node(node, check, options_.launcher_args, options_.connect_timeout_s), std::vector<std::string>{},
        (fs::path(options_.run_dir) / fmt::format("health_node{}.txt", node.id)).string(), /*echo=*/false));
  }
  const double deadline = now_s() + options_.health_timeout_s;
  std::vector<bool> healthy;
  for (auto& job : jobs) healthy.push_back(job->wait(std::max(0.0, deadline - now_s()), options_.grace_s) == 0);
  return healthy;
}

bool Supervisor::replace_bad_nodes(Incident& incident, Report& report) {
  // The node involved; every node when none is known, or when replicas
  // disagree (the corruption check names ranks, but any of them may lie).
  // None after a divergence: the loss is summed over every rank, so a
  // non-finite one is the run's numerics, not a node's (a node computing
  // garbage shows as replicas that disagree: corruption, which checks all).
  // Ranks that named each other (a link cut) name the nodes of both ends.
  std::vector<Node> suspects;
  const auto& named = incident.suspect_nodes;
  for (const Node& n : active_)
    if (incident.kind != "divergence" &&
        (incident.kind == "corruption" || n.id == incident.node ||
         (incident.node < 0 && (named.empty() || std::count(named.begin(), named.end(), n.id) > 0))))
      suspects.push_back(n);
  // A straggler is cordoned whatever its health check says: the job asked for it.
  const bool cordon_anyway = incident.kind == "straggler" && incident.node >= 0;
  const std::vector<bool> healthy = options_.health ? nodes_healthy(suspects) : std::vector<bool>(suspects.size(), true);
  for (std::size_t k = 0; k < suspects.size(); ++k) {
    const Node& node = suspects[k];
    const bool ok = healthy[k];
    incident.health.push_back({{"node", node.id}, {"host", node.host}, {"healthy", ok}});
    if (ok && !cordon_anyway) continue;
    const std::string why = ok ? "a persistent straggler" : "failed its health check";
    cordoned_.push_back(node);
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

Report Supervisor::run() {
  fs::create_directories(options_.run_dir);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  Report report;
  const double wall_start = now_s();
  std::optional<Incident> pending;  // the last incident, until the relaunch
  // Every step completed under htrun, the last time it completed: a step
  // redone after a resume counts once.
  std::map<std::int64_t, MetricsRecord> completed;
  int failures_in_a_row = 0;
  int last_early_failure_code = -1;
  for (;;) {
    const std::int64_t resume_step = latest_checkpoint_step(options_.run_dir);
    const Watch w = launch_and_watch(report.restarts + 1, resume_step);
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
      double first_done_s = w.steps.begin()->second.time_s;
      for (const auto& [step, m] : w.steps) first_done_s = std::min(first_done_s, m.time_s);
      for (Incident& i : report.incidents)
        if (!i.recovery_s && first_done_s >= i.detected_at) i.recovery_s = first_done_s - i.detected_at;
    }
    for (const auto& [step, m] : w.steps) completed[step] = m;
    if (w.kind.empty() && w.exit_code == 0) {
      report.exit_code = 0;
      report.verdict = "the job finished";
      break;
    }
    Incident incident = classify(w);
    incident.time_s = incident.detected_at - wall_start;
    const std::string who = incident.rank >= 0 ? fmt::format("rank {} ({})", incident.rank, node_name(incident.node))
                            : incident.kind == "preemption" ? "every rank"
                                                            : "an unknown rank";
    std::fprintf(stderr, "htrun: %s of %s detected after %.2f s; the job reached step %lld%s\n", incident.kind.c_str(),
                 who.c_str(), incident.detection_latency_s, (long long)incident.step_reached,
                 incident.message.empty() ? "" : (": " + incident.message).c_str());
    // Ranks preempted by someone else (Slurm signals the tasks) saved and
    // stopped: so does the job.
    if (incident.kind == "preempted") incident.kind = "preemption";
    if (incident.kind == "preemption" || incident.kind == "error") {
      report.incidents.push_back(incident);
      report.exit_code = incident.kind == "preemption" ? 77 : 2;
      report.verdict = incident.kind == "preemption"
                           ? preemption_verdict(w)
                           : "the program failed on its input (exit record kind 'error'); not retried";
      break;
    }
    // A program that never beat cannot be watched: relaunching cannot help.
    if (incident.kind == "no-heartbeat") {
      report.incidents.push_back(incident);
      report.exit_code = 2;
      report.verdict = "the program wrote no heartbeat, so htrun cannot watch it (see docs/htrun.md); not retried";
      break;
    }
    // The program failing the same way before any training, with nothing
    // said (a usage error, a missing file), will fail again: stop.
    const bool early_failure = w.kind.empty() && w.exits.empty() && w.dead_rank.rank < 0 && w.lost_host.host.empty() &&
                               w.first_step < 0 &&
                               w.reached == resume_step && w.exit_code < 128;
    if (early_failure && w.exit_code == last_early_failure_code) {
      report.incidents.push_back(incident);
      report.exit_code = 2;
      report.verdict = fmt::format("the program failed before training twice in a row (exit {}); see {}", w.exit_code,
                                   (fs::path(options_.run_dir) / "htrun_job.log").string());
      break;
    }
    last_early_failure_code = early_failure ? w.exit_code : -1;
    if (!replace_bad_nodes(incident, report)) {
      report.incidents.push_back(incident);
      report.exit_code = 1;
      break;
    }
    if (report.restarts >= options_.max_restarts) {
      report.incidents.push_back(incident);
      report.verdict = fmt::format("gave up after {} restarts", options_.max_restarts);
      report.exit_code = 1;
      break;
    }
    ++report.restarts;
    pending = incident;
    // No back-off after a launch that trained past its checkpoint: the
    // failure is the job's, not a loop. Then it doubles with each failure
    // in a row that made no progress. It runs from the detection: the
    // health checks above count towards it.
    failures_in_a_row = w.reached > resume_step ? 0 : failures_in_a_row + 1;
    const double backoff =
        failures_in_a_row == 0 ? 0.0
                               : std::min(30.0, options_.backoff_s * double(1 << std::min(failures_in_a_row - 1, 5)));
    const double relaunch_at = incident.detected_at + backoff;
    while (now_s() < relaunch_at && !g_stop_signal) sleep_s(0.05);
    if (g_stop_signal) {
      report.incidents.push_back(*pending);
      pending.reset();
      report.exit_code = 77;
      report.verdict = fmt::format("stopped by a signal before relaunching; the newest checkpoint is step {}",
                                   latest_checkpoint_step(options_.run_dir));
      break;
    }
  }
  if (pending) report.incidents.push_back(*pending);
  report.wall_s = now_s() - wall_start;
  for (const auto& [step, m] : completed) report.productive_s += m.step_s;
  for (const Node& n : cordoned_) report.cordoned.push_back(n.id);
  for (const Node& n : active_) report.active.push_back(n.id);
  for (const Node& n : spares_) report.spares_left.push_back(n.id);
  std::ofstream(fs::path(options_.run_dir) / "htrun_report.json") << report.to_json().dump(1) << "\n";
  // Simulated nodes' memory is this machine's: the run is over, free it
  // (the checkpoints on disk stay). A program finishing frees its own.
  if (cluster_.kind() == ClusterKind::kLocal) {
    std::error_code ignored;
    fs::remove_all(memory_dir(), ignored);
  }
  return report;
}

}  // namespace htrun
