// htrun's decisions (decisions.h): who is to blame, when, what to check, how
// long to wait. Pure functions of what the supervisor saw.
#include "htrun/decisions.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace htrun {

using ht::resilience::ExitKind;
using ht::resilience::Phase;

int Placement::node_of_rank(int rank) const {
  return rank >= 0 && rank / slots < int(active.size()) ? rank / slots : -1;
}

int Placement::node_of_host(const std::string& host) const {
  for (std::size_t n = 0; n < active.size(); ++n)
    if (active[n].host == host || active[n].host.substr(0, active[n].host.find('.')) == host) return int(n);
  return -1;
}

namespace {

// The nodes whose ranks beat, each with its newest beat, by index.
std::map<int, double> newest_beats(const Hosts& hosts) {
  std::map<int, double> newest;
  for (std::size_t n = 0; n < hosts.size(); ++n)
    if (hosts[n].summary.newest_beat_ms > 0) newest[int(n)] = hosts[n].newest_beat_s();
  return newest;
}

std::string name_of(const Placement& placement, std::size_t n) {
  return n < placement.active.size() ? node_name(placement.active[n]) : fmt::format("node index {}", n);
}

}  // namespace

double beat_interval_s(const Hosts& hosts) {
  double interval = 0;
  for (const HostView& h : hosts)
    if (h.summary.beat_interval_ms > 0) {
      const double s = double(h.summary.beat_interval_ms) / 1000;
      interval = interval > 0 ? std::min(interval, s) : s;
    }
  return interval;
}

double host_silence_s(double beat_interval_s) { return std::max(2.0, 10 * beat_interval_s); }

std::optional<Finding> silent_host(const Hosts& hosts, const Placement& placement, double now_s,
                                   double beat_interval_s) {
  if (beat_interval_s <= 0) return std::nullopt;
  const double silence = host_silence_s(beat_interval_s);
  const std::map<int, double> newest = newest_beats(hosts);
  for (const auto& [n, t] : newest)
    if (now_s - t > silence && now_s - hosts[std::size_t(n)].heard_s < silence / 4 &&
        std::any_of(newest.begin(), newest.end(), [&](const auto& o) { return now_s - o.second < silence / 4; }))
      return Finding{.kind = IncidentKind::kHostLost,
                     .rank = n * placement.slots,
                     .failed_at = t,
                     .message = fmt::format("every rank on {} stopped beating {:.1f} s ago while the others beat on",
                                            name_of(placement, std::size_t(n)), now_s - t)};
  return std::nullopt;
}

std::optional<Finding> agent_lost(const Hosts& hosts, const Placement& placement, double now_s) {
  for (std::size_t n = 0; n < hosts.size(); ++n) {
    const HostView& h = hosts[n];
    if (h.lost_s <= 0) continue;
    const bool down = h.answers == false;
    if (!down && now_s - h.lost_s < kAgentReconnectS) continue;
    const double failed_at = h.summary.newest_beat_ms > 0 ? std::min(h.newest_beat_s(), h.lost_s) : h.lost_s;
    return Finding{
        .kind = IncidentKind::kHostLost,
        .rank = int(n) * placement.slots,
        .failed_at = failed_at,
        .message = down ? fmt::format("the node agent of {} lost its connection and the host does not answer: down",
                                      name_of(placement, n))
                        : fmt::format("the node agent of {} lost its connection {:.1f} s ago and did not come back "
                                      "(the host answers: the agent died, and its ranks with it)",
                                      name_of(placement, n), now_s - h.lost_s)};
  }
  return std::nullopt;
}

std::optional<Finding> silent_agent(const Hosts& hosts, const Placement& placement, double now_s,
                                    double unreachable_after_s) {
  for (std::size_t n = 0; n < hosts.size(); ++n) {
    const HostView& h = hosts[n];
    if (h.heard_s <= 0 || h.lost_s > 0 || now_s - h.heard_s < unreachable_after_s) continue;
    for (std::size_t o = 0; o < hosts.size(); ++o)
      if (o != n && hosts[o].heard_s > h.heard_s + 0.5 * unreachable_after_s)
        return Finding{.kind = IncidentKind::kHostLost,
                       .rank = int(n) * placement.slots,
                       .failed_at = h.heard_s,
                       .message = fmt::format("nothing came from the node agent of {} for {:.1f} s while the others "
                                              "spoke: cut off from the network, or down",
                                              name_of(placement, n), now_s - h.heard_s)};
  }
  return std::nullopt;
}

std::optional<Finding> hang(const Hosts& hosts, double now_s, double last_step_done_s, double hang_timeout_s) {
  // A step completed is progress of every rank (none completes a step
  // alone): heartbeats are sampled, the step records are not.
  const wire::RankPlace* hung = nullptr;
  for (const HostView& h : hosts)
    if (const auto& p = h.summary.slowest;
        p && h.lost_s <= 0 && now_s - h.heard_s <= hang_timeout_s / 2 &&
        now_s - std::max(double(p->progress_ms) / 1000, last_step_done_s) > hang_timeout_s &&
        (!hung || behind(*p, *hung)))
      hung = &*p;
  if (!hung) return std::nullopt;
  return Finding{.kind = IncidentKind::kHang,
                 .rank = hung->rank,
                 .failed_at = double(hung->progress_ms) / 1000,
                 .message = {}};
}

int start_laggard(const Hosts& hosts, const Placement& placement) {
  // (class, rank): no beat 0, kLaunch 1, kStart 2; the smallest.
  std::pair<int, int> first{3, -1};
  const int nodes = int(placement.active.size());
  for (int n = 0; n < nodes; ++n) {
    const HostView* h = std::size_t(n) < hosts.size() ? &hosts[std::size_t(n)] : nullptr;
    std::pair<int, int> mine{3, -1};
    if (!h || !h->summarized) {
      mine = {0, n * placement.slots};
    } else if (const wire::RankPlace& l = h->summary.laggard; l.rank >= 0) {
      mine = {l.time_ms == 0 ? 0 : l.phase == Phase::kLaunch ? 1 : 2, l.rank};
    }
    if (mine.second >= 0 && mine < first) first = mine;
  }
  return first.second;
}

Finding start_not_finished(const Hosts& hosts, int laggard, double launched_at,
                           double start_timeout_s, const std::string& program) {
  bool laggard_beat = false, any_beat = false;
  for (const HostView& h : hosts) {
    any_beat = any_beat || h.summary.beating > 0;
    if (h.summary.laggard.rank == laggard && h.summary.laggard.time_ms > 0) laggard_beat = true;
  }
  Finding f{.kind = IncidentKind::kHang,
            .rank = laggard,
            .failed_at = launched_at + start_timeout_s,
            .message = fmt::format("rank {} did not {} within the start timeout ({:g} s)", laggard,
                                   laggard_beat ? "finish starting" : "start", start_timeout_s)};
  // Not one heartbeat from any rank: the program does not keep the contract
  // (a program on ht::train::Job beats from its first moment).
  if (!any_beat) {
    f.kind = IncidentKind::kNoHeartbeat;
    f.rank = -1;
    f.message = fmt::format(
        "no rank sent a heartbeat within the start timeout ({:g} s): '{}' does not keep htrun's contract "
        "(heartbeats to its node agent; programs built on ht::train::Job keep it; see docs/htrun.md)",
        start_timeout_s, program);
  }
  return f;
}

double baseline_step_s(const Progress& progress) {
  if (int(progress.size()) <= kStepsForBaseline) return 0;
  std::vector<double> per_step;
  for (std::size_t i = 1; i < progress.size(); ++i)
    per_step.push_back((progress[i].first - progress[i - 1].first) /
                       double(std::max<std::int64_t>(1, progress[i].second - progress[i - 1].second)));
  return *std::min_element(per_step.begin(), per_step.end());
}

bool steps_stalled(const Progress& progress, double now_s, double min_s) {
  const double base = baseline_step_s(progress);
  return base > 0 && now_s - progress.back().first > std::max(min_s, 20 * base);
}

bool link_tests_settled(const std::vector<LinkTestRun>& runs, double now_s, double timeout_s) {
  return std::all_of(runs.begin(), runs.end(),
                     [&](const LinkTestRun& r) { return r.done_s > 0 || now_s - r.sent_s > timeout_s; });
}

std::map<int, double> link_rates(const std::vector<LinkTestRun>& runs, double now_s, double* median) {
  std::map<int, double> by_node;
  std::vector<double> rates;
  for (const LinkTestRun& r : runs) {
    const double took = std::max(1e-6, (r.done_s > 0 ? r.done_s : now_s) - r.sent_s);
    rates.push_back(by_node[r.node] = double(r.bytes) / took);
  }
  *median = 0;
  if (!rates.empty()) {
    std::nth_element(rates.begin(), rates.begin() + std::ptrdiff_t(rates.size() / 2), rates.end());
    *median = rates[rates.size() / 2];
  }
  return by_node;
}

std::optional<Finding> slow_link(const std::vector<LinkTestRun>& runs, const Placement& placement, double now_s) {
  if (runs.size() < 3) return std::nullopt;
  double median = 0;
  const std::map<int, double> rates = link_rates(runs, now_s, &median);
  const auto rate = [&](const LinkTestRun& r) { return rates.at(r.node); };
  const LinkTestRun* slowest = nullptr;
  for (const LinkTestRun& r : runs)
    if (r.index >= 0 && rate(r) * kSlowLinkFactor < median && (!slowest || rate(r) < rate(*slowest))) slowest = &r;
  if (!slowest) return std::nullopt;
  return Finding{.kind = IncidentKind::kStraggler,
                 .rank = slowest->index * placement.slots,
                 .failed_at = slowest->sent_s,
                 .message = fmt::format("the link of {} carried {:.0f} KB/s{}, {:.0f} times slower than the median of "
                                        "the {} nodes tested ({:.0f} KB/s): a gray failure",
                                        name_of(placement, std::size_t(slowest->index)), rate(*slowest) / 1000,
                                        slowest->done_s > 0 ? "" : " or less", median / rate(*slowest), runs.size(),
                                        median / 1000)};
}

double last_beat(const Hosts& hosts, int node, double otherwise) {
  if (node < 0 || std::size_t(node) >= hosts.size() || hosts[std::size_t(node)].summary.newest_beat_ms <= 0)
    return otherwise;
  return hosts[std::size_t(node)].newest_beat_s();
}

int stale_node(const Hosts& hosts) {
  // Each node's newest beat; the stalest node, if it fell silent more than
  // a second (ten default beats of the tests, half a default beat) before
  // every other node.
  const std::map<int, double> newest = newest_beats(hosts);
  if (newest.size() < 2) return -1;
  int stalest = -1;
  for (const auto& [n, t] : newest)
    if (stalest < 0 || t < newest.at(stalest)) stalest = n;
  for (const auto& [n, t] : newest)
    if (n != stalest && t - newest.at(stalest) < 1.0) return -1;
  return stalest;
}

namespace {

// Who failed, how and when, as the rules below find it.
struct Culprit {
  std::optional<IncidentKind> kind;
  int rank = -1;
  std::string message;
  double failed_at = 0;
  std::vector<int> suspect_indices;  // into placement.active: nodes the health checks decide on
};

// A rank's own record of its failure (a peer's communication failure is an
// effect, not the cause).
bool blame_own_record(const Watch& w, Culprit& c) {
  for (const ExitRecord& e : w.exits) {
    const auto own = ht::resilience::incident_of_exit(e.kind);
    if (!own) continue;
    c.kind = own;
    c.rank = e.blamed_ranks.empty() ? e.rank : e.blamed_ranks.front();
    c.message = e.message;
    c.failed_at = e.time_s();
    return true;
  }
  return false;
}

// The launcher's reports: a rank killed, a host lost. A lost host that was
// reported first and is not the killed rank's is the cause (srun kills the
// other tasks of a step whose node failed, and says so after).
bool blame_launcher_report(const Watch& w, const Placement& placement, Culprit& c) {
  const bool lost_first =
      !w.lost_host.host.empty() &&
      (w.dead_rank.rank < 0 || (placement.node_of_host(w.lost_host.host) != placement.node_of_rank(w.dead_rank.rank) &&
                                w.lost_host.time_s <= w.dead_rank.time_s));
  if (w.dead_rank.rank >= 0 && !lost_first) {
    c.kind = IncidentKind::kCrash;
    c.rank = w.dead_rank.rank;
    c.failed_at = last_beat(w.hosts, placement.node_of_rank(c.rank), w.dead_rank.time_s);
    return true;
  }
  if (w.lost_host.host.empty()) return false;
  const int node = placement.node_of_host(w.lost_host.host);
  c.kind = IncidentKind::kHostLost;
  c.rank = node >= 0 ? node * placement.slots : -1;
  c.message = fmt::format("the launcher lost host {}", w.lost_host.host);
  c.failed_at = last_beat(w.hosts, node, w.lost_host.time_s);
  return true;
}

// Nodes whose ranks beat on after the launcher was gone: their host was cut
// off, and they are stuck where the cut caught them, so the last change of
// their step or phase is when it came.
bool blame_orphans(const Watch& w, const Placement& placement, Culprit& c) {
  if (w.orphans.empty()) return false;
  const int node = w.orphans.front();
  c.kind = IncidentKind::kHostLost;
  c.rank = node * placement.slots;
  std::vector<std::string> names;
  for (int n : w.orphans) names.push_back(name_of(placement, std::size_t(n)));
  c.message = fmt::format("the ranks of {} beat on after the launcher was gone: their host is cut off from it",
                          fmt::join(names, ", "));
  if (std::size_t(node) < w.hosts.size()) c.failed_at = double(w.hosts[std::size_t(node)].summary.newest_progress_ms) / 1000;
  return true;
}

// Communication failures: the ranks each record names. A rank named by a
// rank it did not name itself is the culprit; ranks that name each other (a
// link cut between them) leave it to the health checks, which check every
// node they are on.
bool blame_comm_failures(const Watch& w, const Placement& placement, double comm_timeout_s, Culprit& c) {
  std::map<int, std::vector<int>> blames;
  for (const ExitRecord& e : w.exits)
    if (e.kind == ExitKind::kCommFailure) blames[e.rank] = e.blamed_ranks;
  std::vector<int> named;
  for (const auto& [rank, blamed] : blames)
    for (int b : blamed) {
      const auto back = blames.find(b);
      const bool mutual = back != blames.end() && std::count(back->second.begin(), back->second.end(), rank) > 0;
      if (!mutual && std::count(named.begin(), named.end(), b) == 0) named.push_back(b);
      if (mutual) c.suspect_indices.push_back(placement.node_of_rank(b));
    }
  if (named.empty() && c.suspect_indices.empty()) return false;
  c.kind = IncidentKind::kCommFailure;
  c.rank = named.empty() ? -1 : named.front();
  // The rank its peers waited for still beats but made no progress for
  // longer than they waited: it hangs (stuck outside communication), and
  // its peers' timeouts are the effect. Its node's slowest rank tells.
  if (const int node = placement.node_of_rank(c.rank); node >= 0 && std::size_t(node) < w.hosts.size())
    if (const auto& slowest = w.hosts[std::size_t(node)].summary.slowest;
        slowest && double(slowest->time_ms - slowest->progress_ms) / 1000 > 0.5 * comm_timeout_s)
      c.kind = IncidentKind::kHang;
  const ExitRecord& first = *std::find_if(w.exits.begin(), w.exits.end(),
                                          [](const ExitRecord& e) { return e.kind == ExitKind::kCommFailure; });
  c.message = first.message;
  c.failed_at = named.empty() ? first.time_s() : last_beat(w.hosts, placement.node_of_rank(c.rank), first.time_s());
  return true;
}

// Nothing said: an exit nobody explained, blamed on the host whose ranks
// stopped beating well before the others did (a host gone with its
// processes), if there is one.
void blame_stale_host(const Watch& w, const Placement& placement, const std::string& job_log, Culprit& c) {
  const int stale = stale_node(w.hosts);
  c.kind = IncidentKind::kFailure;
  if (stale >= 0) {
    c.rank = stale * placement.slots;
    c.failed_at = last_beat(w.hosts, stale, 0);
    c.message = fmt::format("the launcher exited {}; the heartbeats of {} stopped first", w.exit_code,
                            node_name(placement.active[std::size_t(stale)]));
  } else {
    c.message = fmt::format("the launcher exited {} and no rank said why (see {})", w.exit_code, job_log);
  }
}

}  // namespace

Incident classify(const Watch& w, const Placement& placement, double comm_timeout_s, const std::string& job_log) {
  // What names the culprit, most direct first: the watch itself (a hang, a
  // preemption); a rank's own record of its failure; the launcher's report
  // of a rank killed or a host lost; ranks beating on without a launcher;
  // the ranks that communication failures name; the host whose heartbeats
  // stopped first. The rank that got least far is only the hang check's,
  // for a job that stopped moving with every rank alive.
  Culprit c{
      .kind = w.kind, .rank = w.failed_rank, .message = w.message, .failed_at = w.failed_at, .suspect_indices = {}};
  if (!c.kind && !blame_own_record(w, c) && !blame_launcher_report(w, placement, c) && !blame_orphans(w, placement, c) &&
      !blame_comm_failures(w, placement, comm_timeout_s, c))
    blame_stale_host(w, placement, job_log, c);
  Incident i;
  i.kind = *c.kind;
  i.rank = c.rank;
  i.message = c.message;
  const double failed_at = c.failed_at == 0 ? w.detected_at : c.failed_at;
  const std::size_t node_index = i.rank >= 0 ? std::size_t(i.rank / placement.slots) : placement.active.size();
  if (node_index < placement.active.size()) {
    i.node = placement.active[node_index].id;
    i.host = placement.active[node_index].host;
  }
  for (int index : c.suspect_indices)
    if (index >= 0 &&
        std::count(i.suspect_nodes.begin(), i.suspect_nodes.end(), placement.active[std::size_t(index)].id) == 0)
      i.suspect_nodes.push_back(placement.active[std::size_t(index)].id);
  i.exit_code = w.exit_code;
  i.detected_at = w.detected_at;
  i.failed_at = failed_at;
  i.detection_latency_s = std::max(0.0, w.detected_at - failed_at);
  i.step_reached = w.reached;
  i.steps_lost = std::max<std::int64_t>(0, w.reached - w.checkpoint_step);
  return i;
}

std::string preemption_verdict(const Watch& w) {
  // A rerun resumes from the newest checkpoint either way.
  const std::int64_t newest = w.checkpoint_step;
  if (newest > w.resume_step || (newest == w.reached && newest > 0))
    return fmt::format("preempted: checkpoint of step {} saved, stopped", newest);
  return fmt::format("preempted: no new checkpoint (the newest is step {}; the job had reached step {}), stopped",
                     newest, w.reached);
}

bool failed_before_training(const Watch& w) {
  return !w.kind && w.exits.empty() && w.dead_rank.rank < 0 && w.lost_host.host.empty() && w.first_step < 0 &&
         w.reached == w.resume_step && w.exit_code < 128;
}

std::vector<Node> nodes_to_check(const Incident& incident, const std::vector<Node>& active) {
  std::vector<Node> suspects;
  const auto& named = incident.suspect_nodes;
  for (const Node& n : active)
    if (incident.kind != IncidentKind::kDivergence &&
        (incident.kind == IncidentKind::kCorruption || n.id == incident.node ||
         (incident.node < 0 && (named.empty() || std::count(named.begin(), named.end(), n.id) > 0))))
      suspects.push_back(n);
  return suspects;
}

bool cordon_even_if_healthy(const Incident& incident) {
  return incident.kind == IncidentKind::kStraggler && incident.node >= 0;
}

bool cordon_unchecked(const Incident& incident, bool spare_ready) {
  return (incident.kind == IncidentKind::kHostLost || cordon_even_if_healthy(incident)) && incident.node >= 0 &&
         spare_ready;
}

LauncherEvent crash_among(const std::vector<Death>& deaths, const std::vector<ExitRecord>& exits) {
  double first_failure = std::numeric_limits<double>::infinity();
  for (const ExitRecord& e : exits)
    if (e.code != 0) first_failure = std::min(first_failure, e.time_s());
  LauncherEvent first;
  for (const Death& d : deaths)
    if (d.time_s < first_failure && (first.rank < 0 || d.time_s < first.time_s))
      first = {.rank = d.rank, .host = {}, .time_s = d.time_s};
  return first;
}

std::optional<double> comm_failure_recorded(const std::vector<ExitRecord>& exits) {
  std::optional<double> first;
  for (const ExitRecord& e : exits)
    if (e.kind == ht::resilience::ExitKind::kCommFailure && !e.blamed_ranks.empty())
      first = std::min(first.value_or(e.time_s()), e.time_s());
  return first;
}

std::vector<Node> nodes_to_readmit(const std::vector<Cordoned>& cordoned, double now_s, double readmit_after_s) {
  std::vector<Node> out;
  if (readmit_after_s < 0) return out;
  for (const Cordoned& c : cordoned)
    if (now_s - c.at >= readmit_after_s) out.push_back(c.node);
  std::sort(out.begin(), out.end(), [](const Node& a, const Node& b) { return a.id < b.id; });
  return out;
}

int failures_in_a_row(int before, std::int64_t reached, std::int64_t resume_step) {
  return reached > resume_step ? 0 : before + 1;
}

double backoff_s(int failures_in_a_row, double base_s) {
  if (failures_in_a_row <= 0) return 0.0;
  return std::min(kMaxBackoffS, base_s * double(1 << std::min(failures_in_a_row - 1, 5)));
}

int auto_summary_interval_ms(std::size_t hosts, double unreachable_after_s) {
  const double budget_ms = std::ceil(double(hosts) * 1000 / kSummariesPerSecond);
  const double most_ms = std::max(500.0, std::floor(unreachable_after_s * 1000 / 3));
  return int(std::clamp(budget_ms, 500.0, most_ms));
}

}  // namespace htrun
