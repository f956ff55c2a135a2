// htrun's supervisor: the run loop, launches and their watch, the report.
// Nodes, agents and health checks are supervisor_nodes.cc's.
#include "htrun/supervisor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "core/files.h"
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

// A directory of its own per run for the ranks' sockets, on every host.
std::string default_agent_dir() {
  const wire::Nonce n = wire::make_nonce();
  return fmt::format("/tmp/htrun-{}-{:02x}{:02x}{:02x}{:02x}", ::geteuid(), n[0], n[1], n[2], n[3]);
}

std::string this_host() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

double Supervisor::comm_timeout_s() const { return std::max(1.0, options_.hang_timeout_s * 2.0 / 3.0); }

std::string Supervisor::memory_dir() const {
  return ht::ckpt::default_memory_dir(protocol::checkpoint_dir(options_.run_dir));
}

Supervisor::Supervisor(SupervisorOptions options, Cluster cluster, Clock clock, std::shared_ptr<Spawner> spawner)
    : options_(std::move(options)),
      cluster_(std::move(cluster)),
      clock_(std::move(clock)),
      spawner_(spawner ? std::move(spawner) : std::make_shared<ProcessSpawner>()),
      secret_(wire::make_secret()) {
  if (!clock_.now) clock_.now = now_s;
  const auto& nodes = cluster_.nodes();
  if (options_.spares >= int(nodes.size()))
    throw std::runtime_error(fmt::format("htrun: {} spare(s) leave no node to run on ({} in all)", options_.spares,
                                         nodes.size()));
  const std::size_t used = nodes.size() - std::size_t(options_.spares);
  active_.assign(nodes.begin(), nodes.begin() + std::ptrdiff_t(used));
  spares_.assign(nodes.begin() + std::ptrdiff_t(used), nodes.end());
  if (options_.agent_dir.empty()) options_.agent_dir = default_agent_dir();
  if (options_.controller_address.empty())
    options_.controller_address = cluster_.kind() == ClusterKind::kLocal ? "127.0.0.1" : this_host();
}

Supervisor::~Supervisor() = default;

const ControllerCounts& Supervisor::counts() const {
  static const ControllerCounts none;
  return controller_ ? controller_->counts() : none;
}

void Supervisor::wait(double seconds) {
  if (clock_.sleep) {
    if (controller_) controller_->poll(0);
    clock_.sleep(seconds);
  } else if (controller_) {
    // The whole time, however many frames arrive meanwhile: the watch's
    // work per look grows with hosts, so it must not look per frame. The
    // frames are taken in batches every 10 ms rather than one wake-up each
    // (16,000 summaries a second from 8,192 agents).
    const double deadline = now() + seconds;
    for (;;) {
      controller_->poll(0);
      const double left = deadline - now();
      if (left <= 0) break;
      sleep_s(std::min(0.01, left));
    }
  } else {
    sleep_s(seconds);
  }
  if (!controller_) return;
  for (AgentEvent& e : controller_->take_events()) {
    if (const auto* result = std::get_if<wire::HealthResult>(&e.message)) health_results_[result->request] = *result;
    else if (const auto* ack = std::get_if<wire::Ack>(&e.message)) acks_[ack->request].insert(e.node);
    else if (const auto* echo = std::get_if<wire::LinkEcho>(&e.message)) {
      if (echo->last) link_done_[echo->request] = e.at_s;
    }
    else launch_events_.push_back(std::move(e));
  }
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

int Supervisor::summary_interval_ms() const {
  if (options_.summary_interval_ms > 0) return options_.summary_interval_ms;
  return auto_summary_interval_ms(cluster_.nodes().size(), options_.unreachable_after_s);
}

std::string Supervisor::plan() const {
  std::string out = fmt::format("nodes: {}; {} active, {} spare, {} slot(s) per node\njob: {}\n", cluster_.describe(),
                                active_.size(), spares_.size(), options_.slots, fmt::join(job_command(), " "));
  out += fmt::format("agents' summaries every {} ms\n", summary_interval_ms());
  if (const std::vector<std::string> all = agents_command(cluster_.nodes()); !all.empty())
    out += fmt::format("agents, one launch: {}\n", fmt::join(all, " "));
  for (const Node& n : cluster_.nodes())
    out += fmt::format("agent of {}{}: {}\n", cluster_.name(n), cluster_.nodes().size() > 1 ? ", alone" : "",
                       fmt::join(agent_command(n), " "));
  std::vector<std::string> check{options_.health_tool, "--node", "N", "..."};
  check.insert(check.end(), options_.health_args.begin(), options_.health_args.end());
  out += fmt::format("health checks, run by the agents: {}\n", fmt::join(check, " "));
  return out;
}

// What one launch's watch carries from one look to the next.
struct Supervisor::WatchState {
  Watch w;
  Placement placed;
  int ranks = 0;  // every rank of the launch
  LaunchState state = LaunchState::kStarting;
  std::optional<double> comm_failure_at;  // when the watch read the first record of a communication failure
  std::vector<Death> deaths;              // the launch's ranks that died with no record, as their agents said
  std::vector<LinkTestRun> link_tests;    // out now, when training crawls
  double link_tested_at = -1e9;           // when the last were started
  double stalled_since_s = 0;             // the last step before the crawl
  Progress progress;                      // the furthest step over time, from the summaries
  /// The exit code the ranks' own records give once every one has ended
  /// (the launcher may not have noticed yet).
  std::optional<int> ranks_ended_code;
  MetricsTail metrics;
  std::int64_t epoch = 0;
  /// Hosts whose agent's connection closed: a probe of each, by node index.
  std::map<std::size_t, std::unique_ptr<HostProbe>> probes;
  /// The MFU peak of the launch's run line, with how it was measured.
  std::optional<std::pair<double, std::string>> mfu_peak;

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
        take_mfu_peak(run->fields);
      }
      if (const auto* step = std::get_if<protocol::StepLine>(&line);
          step && step->time_s() >= w.launched_at && protocol::of_launch(step->epoch, epoch)) {
        w.steps[step->step] = *step;
        w.last_step_done_s = std::max(w.last_step_done_s, step->time_s());
      }
    }
  }
  // The MFU peak the launch's rank 0 measured, for the launches after it.
  void take_mfu_peak(const protocol::Fields& fields) {
    const auto tflops = fields.find("peak_tflops");
    const auto source = fields.find("peak_source");
    if (tflops == fields.end() || source == fields.end()) return;
    const double* value = std::get_if<double>(&tflops->second);
    const std::string* how = std::get_if<std::string>(&source->second);
    if (value && how && *value > 0) mfu_peak = {{*value, *how}};
  }
  // The watch found `f`: the launch ends for it.
  void declare(const Finding& f) {
    w.kind = f.kind;
    w.failed_rank = f.rank;
    w.failed_at = f.failed_at;
    w.message = f.message;
  }
};

// ------------------------------------------------------------ detectors

// What a detector found: the launch ends at `at`, for `finding` when the
// watch names the culprit itself (else classify() does, from the records);
// a host lost ends it with KILL at once.
struct Supervisor::Detected {
  std::optional<Finding> finding;
  double at = 0;
  bool host_lost = false;
};

// The detectors, asked in this order each look: the most direct evidence
// first. Each applies in the launch states it names; the first that finds
// something ends the launch.
const Supervisor::Detector Supervisor::kDetectors[] = {
    {"the job ended", true, true, &Supervisor::job_ended},
    {"a rank died, or a host was lost", true, true, &Supervisor::rank_died_or_host_lost},
    {"a node's agent lost", true, true, &Supervisor::node_agent_lost},
    {"a node's ranks silent", false, true, &Supervisor::node_silent},
    {"a node cut off", true, true, &Supervisor::node_cut_off},
    {"a node's link slow", false, true, &Supervisor::link_slow},
    {"progress stalled", true, true, &Supervisor::progress_stalled},
    {"a start that never ends", true, false, &Supervisor::start_unfinished},
    {"a peer named by a communication failure", true, true, &Supervisor::peer_named},
};

bool Supervisor::run_detectors(Process& job, WatchState& s, double t) {
  for (const Detector& d : kDetectors) {
    if (!(s.state == LaunchState::kStarting ? d.while_starting : d.while_training)) continue;
    const std::optional<Detected> found = (this->*d.find)(job, s, t);
    if (!found) continue;
    if (found->finding) s.declare(*found->finding);
    s.w.detected_at = found->at;
    s.state = LaunchState::kEnded;
    // Ranks that lost a host cannot finish anything with it (a TERM,
    // taken for a preemption, would only have them try to save with a peer
    // gone), and the launcher cannot reach it to end its daemon there:
    // they are killed at once.
    if (!job.poll()) job.stop(found->host_lost ? 0 : options_.grace_s);
    return true;
  }
  return false;
}

std::optional<Supervisor::Detected> Supervisor::job_ended(Process& job, WatchState& s, double t) {
  // The launcher exited, or every rank's process ended (the agents say so)
  // and the launcher has not noticed yet.
  if (job.poll() || s.ranks_ended_code) return Detected{std::nullopt, t, false};
  return std::nullopt;
}

std::optional<Supervisor::Detected> Supervisor::rank_died_or_host_lost(Process& job, WatchState& s, double t) {
  // A rank died with no exit record (its agent saw its socket close, or
  // the launcher said so), or the launcher lost a host: the launcher may
  // take a while to end the others (srun waits KillWait for ranks stuck
  // in a collective; mpirun cannot reach a host that is gone).
  const bool lost = !job.lost_host().host.empty();
  if (s.w.dead_rank.rank >= 0 || job.dead_rank().rank >= 0 || lost) return Detected{std::nullopt, t, lost};
  return std::nullopt;
}

std::optional<Supervisor::Detected> Supervisor::node_agent_lost(Process&, WatchState& s, double t) {
  if (auto f = agent_lost(s.w.hosts, s.placed, t)) return Detected{std::move(f), t, true};
  return std::nullopt;
}

std::optional<Supervisor::Detected> Supervisor::node_silent(Process&, WatchState& s, double t) {
  // While link tests are out, a slow link's summaries queue behind its
  // echoes: its ranks look silent while its agent speaks. The tests decide.
  if (!s.link_tests.empty()) return std::nullopt;
  if (auto f = silent_host(s.w.hosts, s.placed, t, beat_interval_s(s.w.hosts))) return Detected{std::move(f), t, true};
  return std::nullopt;
}

std::optional<Supervisor::Detected> Supervisor::node_cut_off(Process&, WatchState& s, double t) {
  if (auto f = silent_agent(s.w.hosts, s.placed, t, options_.unreachable_after_s))
    return Detected{std::move(f), t, true};
  return std::nullopt;
}

std::optional<Supervisor::Detected> Supervisor::link_slow(Process&, WatchState& s, double t) {
  // Training slowed to a crawl (a gray failure: a host's link far slower
  // than it should be, which no health check of the host alone sees):
  // test every node's link through its agent, the spares' as references,
  // and end the launch for one far slower than the others.
  Watch& w = s.w;
  if (s.link_tests.empty()) {
    if (t - s.link_tested_at < kLinkRetestS || !steps_stalled(s.progress, t)) return std::nullopt;
    std::vector<Node> nodes = active_;
    nodes.insert(nodes.end(), spares_.begin(), spares_.end());
    s.link_tests = start_link_tests(nodes, [&](int id) {
      for (std::size_t n = 0; n < active_.size(); ++n)
        if (active_[n].id == id) return int(n);
      return -1;
    });
    s.link_tested_at = t;
    s.stalled_since_s = s.progress.back().first;
    std::fprintf(stderr, "htrun: training crawls (no step completed for %.1f s, %.0f times its step time): testing the "
                 "links of %zu node(s)\n", t - s.stalled_since_s, (t - s.stalled_since_s) / baseline_step_s(s.progress),
                 s.link_tests.size());
    return std::nullopt;
  }
  take_link_echoes(s.link_tests);
  if (!link_tests_settled(s.link_tests, t, kLinkTestTimeoutS)) return std::nullopt;
  std::optional<Finding> f = slow_link(s.link_tests, s.placed, t);
  double median = 0;
  std::string rates;
  for (const auto& [node, rate] : link_rates(s.link_tests, t, &median))
    rates += fmt::format("{}{}: {:.0f} KB/s", rates.empty() ? "" : ", ", node_name(node), rate / 1000);
  std::fprintf(stderr, "htrun: the links: %s%s\n", rates.c_str(), f ? "" : " (none far slower than the others)");
  s.link_tests.clear();
  if (!f) return std::nullopt;
  w.degraded_from_s = s.stalled_since_s;
  return Detected{std::move(f), t, true};
}

std::optional<Supervisor::Detected> Supervisor::progress_stalled(Process&, WatchState& s, double t) {
  if (auto f = hang(s.w.hosts, t, s.w.last_step_done_s, options_.hang_timeout_s))
    return Detected{std::move(f), t, false};
  return std::nullopt;
}

std::optional<Supervisor::Detected> Supervisor::start_unfinished(Process&, WatchState& s, double t) {
  // A rank that never arrived (no heartbeat: it is stuck before MPI is up,
  // and so are its peers) or never got past start-up: the hang rule cannot
  // see either. Heartbeats are sampled: a short launch can start, train and
  // save between two beats, so what the ranks recorded tells that it
  // started too: training began (every rank is past start-up then:
  // building the engine is collective), a step completed, a rank sent its
  // exit record, a checkpoint was committed.
  Watch& w = s.w;
  const int laggard = start_laggard(w.hosts, s.placed);
  if (laggard < 0 || w.training_began || !w.steps.empty() || !w.exits.empty()) {
    s.state = LaunchState::kTraining;
    return std::nullopt;
  }
  if (options_.start_timeout_s <= 0 || t - w.launched_at <= options_.start_timeout_s) return std::nullopt;
  if (latest_checkpoint_step(options_.run_dir) > w.resume_step) {
    s.state = LaunchState::kTraining;
    return std::nullopt;
  }
  return Detected{start_not_finished(w.hosts, laggard, w.launched_at, options_.start_timeout_s,
                                     options_.program.empty() ? std::string("the program") : options_.program.front()),
                  t, false};
}

std::optional<Supervisor::Detected> Supervisor::peer_named(Process&, WatchState& s, double t) {
  // A rank's collective timed out and it named the peer: the launch ends
  // once its peers had a moment to say theirs (classify reads them all).
  if (!s.comm_failure_at) {
    if (comm_failure_recorded(s.w.exits)) s.comm_failure_at = t;
  } else if (t - *s.comm_failure_at >= kCommFailureSettleS) {
    return Detected{std::nullopt, *s.comm_failure_at, false};
  }
  return std::nullopt;
}

// ------------------------------------------------------------- the watch

std::unique_ptr<Process> Supervisor::start_launch(int launch, std::int64_t resume_step, Report& report) {
  // A new epoch: the ranks of every earlier launch are ended by their
  // agents (any left on a host that was cut off, at its agent's next
  // Welcome), and a checkpoint commit of theirs is refused.
  epoch_ = std::max(epoch_, read_launch_epoch(options_.run_dir)) + 1;
  write_launch_epoch(options_.run_dir, epoch_);
  controller_->set_epoch(epoch_);
  launch_events_.clear();
  // Every agent is told the new launch (its ranks, none for a node not in
  // it): each ends what is left of older launches and acknowledges.
  std::map<int, int> index;
  for (std::size_t n = 0; n < active_.size(); ++n) index[active_[n].id] = int(n);
  LaunchRecord record{.launch = launch, .epoch = epoch_, .started_at = now(), .ack_s = 0, .unacknowledged = {}};
  record.ack_s = command_all(active_, spares_,
                             [&](const Node& n, std::uint32_t request) -> wire::Message {
                               const auto it = index.find(n.id);
                               return wire::Launch{.request = request,
                                                   .epoch = epoch_,
                                                   .first_rank = it == index.end() ? 0 : it->second * options_.slots,
                                                   .ranks = it == index.end() ? 0 : options_.slots};
                             },
                             &record.unacknowledged);
  for (int id : record.unacknowledged)
    std::fprintf(stderr, "htrun: warning: the agent of %s did not acknowledge launch %d within %g s\n",
                 node_name(id).c_str(), launch, options_.ack_timeout_s);
  report.launches.push_back(record);
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
  if (!std::getenv(protocol::kEnvCommTimeout))
    env.push_back(fmt::format("{}={:g}", protocol::kEnvCommTimeout, comm_timeout_s()));
  env.push_back(fmt::format("{}={}", protocol::kEnvLaunchEpoch, epoch_));
  env.push_back(fmt::format("{}={}", protocol::kEnvAgentDir, options_.agent_dir));
  env.insert(env.end(), mfu_peak_env_.begin(), mfu_peak_env_.end());
  if (cluster_.kind() == ClusterKind::kLocal)
    env.push_back(fmt::format("{}={}:{}", protocol::kEnvSimulatedNodes, options_.slots, fmt::join(ids, ",")));
  return spawner_->launch(job_command(env), env, protocol::job_log_path(options_.run_dir),
                          [this](const std::string& line) { return cluster_.launcher_event(line); });
}

Watch Supervisor::launch_and_watch(int launch, std::int64_t resume_step, Report& report) {
  std::unique_ptr<Process> job = start_launch(launch, resume_step, report);
  WatchState s(options_.run_dir, epoch_);
  s.w.resume_step = s.w.reached = resume_step;
  s.w.launched_at = now();
  s.placed = placement();
  s.ranks = int(active_.size()) * options_.slots;
  s.w.hosts.assign(active_.size(), HostView{});
  while (!poll_launch(*job, s)) {
  }
  conclude_watch(*job, s);
  // A peak measured once serves the whole job (one given with
  // --peak-tflops is the program's own flag, given again at each launch).
  if (mfu_peak_env_.empty() && s.mfu_peak && s.mfu_peak->second.rfind("given", 0) != 0)
    mfu_peak_env_ = {fmt::format("{}={:.17g}", protocol::kEnvMfuPeak, s.mfu_peak->first),
                     fmt::format("{}={}", protocol::kEnvMfuPeakSource, s.mfu_peak->second)};
  // Each node's communication wait, as its agent's last summary of the launch said.
  for (std::size_t n = 0; n < active_.size() && n < s.w.hosts.size(); ++n)
    if (s.w.hosts[n].summarized)
      report.launches.back().comm_wait.push_back(
          {.node = active_[n].id, .comm_wait_s = double(s.w.hosts[n].summary.comm_wait_ms) / 1000});
  return s.w;
}

void Supervisor::take_launch_events(WatchState& s) {
  Watch& w = s.w;
  for (AgentEvent& e : std::exchange(launch_events_, {})) {
    if (const auto* x = std::get_if<wire::RankExit>(&e.message)) {
      if (!protocol::of_launch(x->record.epoch, epoch_)) continue;
      w.exits.push_back(x->record);
    } else if (const auto* d = std::get_if<wire::RankDied>(&e.message)) {
      // Deaths after the watch ended are its own doing (the job stopped).
      if (d->epoch != epoch_ || s.state == LaunchState::kEnded) continue;
      s.deaths.push_back({.rank = d->rank, .time_s = double(d->time_ms) / 1000});
    }
  }
  // The first to exit first: the others often exit because of it.
  std::stable_sort(w.exits.begin(), w.exits.end(),
                   [](const protocol::ExitRecord& a, const protocol::ExitRecord& b) { return a.time_ms < b.time_ms; });
  w.dead_rank = crash_among(s.deaths, w.exits);
}

void Supervisor::update_hosts(WatchState& s, double t) {
  Watch& w = s.w;
  const int port = options_.probe_port >= 0 ? options_.probe_port : cluster_.probe_port();
  bool every_rank_ended = !active_.empty();
  for (std::size_t n = 0; n < active_.size(); ++n) {
    HostView& h = w.hosts[n];
    const AgentState* a = controller_->agent(active_[n].id);
    if (!a) {
      every_rank_ended = false;
      continue;
    }
    h.heard_s = a->heard_s;
    h.lost_s = a->connected ? 0 : a->lost_s;
    if (a->summary && a->summary->epoch == epoch_) {
      h.summary = *a->summary;
      h.summarized = true;
    }
    every_rank_ended = every_rank_ended && h.summarized && h.summary.beating == h.summary.ranks &&
                       h.summary.live == 0 && h.summary.ranks > 0;
    // A host whose agent's connection closed: does the host itself answer?
    if (h.lost_s > 0 && port > 0 && !active_[n].host.empty()) {
      auto& probe = s.probes[n];
      if (!probe) probe = std::make_unique<HostProbe>(std::vector<std::string>{active_[n].host}, port, 0.1, 0.3);
      probe->poll(t);
      const ProbeState p = probe->states().at(0);
      if (p.refused > 0 || p.missed >= kProbesMissedToCut) h.answers = false;
      else if (p.accepted && p.last_answer_s > h.lost_s) h.answers = true;
    } else if (h.lost_s == 0) {
      s.probes.erase(n);
      h.answers.reset();
    }
    const std::int64_t done = h.summary.completed_step;
    if (h.summarized && done > w.reached) {
      if (w.first_step < 0) w.first_step = done;
      w.reached = done;
    }
  }
  if (w.first_step >= 0 && (s.progress.empty() || w.reached > s.progress.back().second))
    s.progress.emplace_back(t, w.reached);
  // Every rank ended: the code their records give (a rank with none was killed).
  if (every_rank_ended && !s.ranks_ended_code) {
    int code = 0;
    std::set<int> recorded;
    for (const protocol::ExitRecord& e : w.exits) {
      recorded.insert(e.rank);
      if (code == 0 && e.code != 0) code = e.code;
    }
    if (code == 0 && int(recorded.size()) < s.ranks) code = 128 + SIGKILL;
    s.ranks_ended_code = code;
  }
}

bool Supervisor::poll_launch(Process& job, WatchState& s) {
  wait(0.1);
  poll_readmissions();
  take_launch_events(s);
  const double t = now();
  update_hosts(s, t);
  s.read_records();
  if (g_stop_signal) {
    pass_on_preemption(job, s);
    return true;
  }
  return run_detectors(job, s, t);
}

void Supervisor::pass_on_preemption(Process& job, WatchState& s) {
  // SIGUSR1 to the ranks themselves, through their agents (a launcher
  // would kill them on TERM): they finish the step, save a checkpoint and
  // exit; then the job ends.
  Watch& w = s.w;
  w.kind = IncidentKind::kPreemption;
  for (const Node& n : active_)
    controller_->send(n.id, wire::Signal{.request = controller_->next_request(), .epoch = epoch_, .signal = SIGUSR1});
  const double deadline = now() + std::max(options_.grace_s, 60.0);
  while (!job.poll() && !s.ranks_ended_code && now() < deadline) {
    wait(0.05);
    take_launch_events(s);
    update_hosts(s, now());
  }
  job.stop(options_.grace_s);
  s.state = LaunchState::kEnded;
  w.detected_at = w.failed_at = now();
}

void Supervisor::conclude_watch(Process& job, WatchState& s) {
  Watch& w = s.w;
  const bool ended_by_itself = job.poll() && !w.kind;
  job.finish();  // every line read: the launcher's report of a dead rank may be in the last ones
  // What the agents still had to say of this launch: the exit records the
  // ranks sent as they left may still be on their way.
  wait(0.03);
  take_launch_events(s);
  update_hosts(s, now());
  s.read_records();
  if (!w.steps.empty()) {
    w.reached = std::max(w.reached, w.steps.rbegin()->second.step);
    if (w.first_step < 0) w.first_step = w.steps.begin()->first;
  }
  w.checkpoint_step = latest_checkpoint_step(options_.run_dir);
  for (const protocol::ExitRecord& e : w.exits) w.reached = std::max(w.reached, protocol::completed_step(e.step, e.phase));
  w.reached = std::max(w.reached, w.checkpoint_step);
  // The launcher's code when it ended by itself; else, when the ranks all
  // ended before it noticed, theirs.
  w.exit_code = ended_by_itself || !s.ranks_ended_code ? job.exit_code() : *s.ranks_ended_code;
  if (const LauncherEvent d = job.dead_rank(); d.rank >= 0 && (w.dead_rank.rank < 0 || d.time_s < w.dead_rank.time_s))
    w.dead_rank = d;
  w.lost_host = job.lost_host();
  // A launch that failed with nothing said: ranks that still beat after
  // the launcher is gone are on a host it could not reach to end them (cut
  // off from it), which is the culprit. A beat or two tells.
  const double interval = beat_interval_s(w.hosts);
  if (!w.kind && w.exit_code != 0 && w.dead_rank.rank < 0 && w.lost_host.host.empty() && w.exits.empty() &&
      interval > 0) {
    const double ended_at = now(), until = ended_at + std::min(5.0, 2.5 * interval);
    while (w.orphans.empty() && now() < until) {
      wait(0.05);
      update_hosts(s, now());
      for (std::size_t n = 0; n < w.hosts.size(); ++n)
        if (w.hosts[n].newest_beat_s() > ended_at) w.orphans.push_back(int(n));
    }
  }
  // What is left of this launch's ranks is ended now, everywhere (the next
  // launch waits for it; the health checks should not run beside them).
  for (const Node& n : all_nodes())
    controller_->send(n.id, wire::End{.request = controller_->next_request(), .epoch = epoch_});
}

// ------------------------------------------------------------ the report

void Supervisor::record_launch(const Watch& w, Report& report, std::optional<Incident>& pending,
                               std::map<std::int64_t, protocol::StepLine>& completed) {
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
  // A launch ended for a slow link: its steps after the crawl began were
  // time lost to the degraded host, not productive.
  for (const auto& [step, m] : w.steps)
    if (w.degraded_from_s <= 0 || m.time_s() <= w.degraded_from_s) completed[step] = m;
}

Incident Supervisor::classify_launch(const Watch& w, double wall_start) const {
  Incident incident = classify(w, placement(), comm_timeout_s(), protocol::job_log_path(options_.run_dir));
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
             "the program sent no heartbeat, so htrun cannot watch it (see docs/htrun.md); not retried"}};
  // The program failing the same way before any training, with nothing
  // said (a usage error, a missing file), will fail again: stop.
  const bool early_failure = failed_before_training(w);
  if (early_failure && w.exit_code == last_early_failure_code)
    return {{kSupervisorNotRetried, fmt::format("the program failed before training twice in a row (exit {}); see {}",
                                                w.exit_code, protocol::job_log_path(options_.run_dir))}};
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
  while (now() < relaunch_at && !g_stop_signal) wait(0.05);
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
  const ControllerCounts& c = counts();
  report.agent_frames = std::int64_t(c.frames);
  report.agent_frames_dropped = std::int64_t(c.dropped_total());
  report.agent_handshake_timeouts = std::int64_t(c.handshake_timeouts);
  // Through a rename: a reader never takes half a report for a whole one.
  try {
    ht::detail::write_file_replacing(protocol::supervisor_report_path(options_.run_dir),
                                     protocol::format_supervisor_report(report) + "\n", /*sync=*/false, "htrun report");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htrun: %s; the report is printed below only\n", e.what());
  }
  // Simulated nodes' memory is this machine's: the run is over, free it
  // (the checkpoints on disk stay). A program finishing frees its own.
  if (cluster_.kind() == ClusterKind::kLocal) {
    std::error_code ignored;
    fs::remove_all(memory_dir(), ignored);
  }
}

Report Supervisor::run() {
  fs::create_directories(options_.run_dir);
  g_stop_signal = 0;
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  // An agent without the controller ends its ranks after this: twice the
  // time a silent agent's host is given before htrun takes it for cut off.
  const int controller_lost_ms = int(std::max(2000.0, 2000 * options_.unreachable_after_s));
  controller_ = std::make_unique<Controller>(ControllerOptions{.bind_address = "0.0.0.0",
                                                               .port = options_.controller_port,
                                                               .secret = secret_,
                                                               .summary_interval_ms = summary_interval_ms(),
                                                               .controller_lost_ms = controller_lost_ms,
                                                               .handshake_timeout_s = 5},
                                             [this] { return now(); });
  Report report;
  const double wall_start = now();
  std::optional<Incident> pending;  // the last incident, until the relaunch
  // Every step completed under htrun, the last time it completed: a step
  // redone after a resume counts once.
  std::map<std::int64_t, protocol::StepLine> completed;
  int failures_in_a_row = 0;
  int last_early_failure_code = -1;
  // Every node's agent, the spares' too: they run the health checks, and a
  // spare is ready the moment it is needed.
  start_agents(all_nodes());
  for (;;) {
    if (!agents_ready(report)) {
      report.exit_code = kSupervisorGaveUp;
      break;
    }
    const std::int64_t resume_step = latest_checkpoint_step(options_.run_dir);
    const Watch w = launch_and_watch(report.restarts + 1, resume_step, report);
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
  stop_agents();
  finish_report(report, wall_start, completed);
  return report;
}

}  // namespace htrun
