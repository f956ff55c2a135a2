// htrun's supervisor: its nodes and their agents — starting the agents,
// commands to all of them, health checks through them, cordoning,
// replacing and readmitting nodes.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "htrun/supervisor.h"

namespace fs = std::filesystem;
namespace protocol = ht::resilience;

namespace htrun {
namespace {

// An agent started again no sooner than this after its last start: a host
// that is down fails each start at once.
constexpr double kAgentRestartS = 1.0;

}  // namespace

std::vector<Node> Supervisor::all_nodes() const {
  std::vector<Node> nodes = active_;
  nodes.insert(nodes.end(), spares_.begin(), spares_.end());
  for (const Cordoned& c : cordoned_) nodes.push_back(c.node);
  return nodes;
}

std::vector<std::string> Supervisor::agent_command(const Node& node) const {
  std::vector<std::string> command{options_.agent_tool,
                                   "--node",
                                   std::to_string(node.id),
                                   "--controller",
                                   // The port is known once htrun listens (a dry run says PORT).
                                   controller_ ? fmt::format("{}:{}", options_.controller_address, controller_->port())
                                   : options_.controller_port > 0
                                       ? fmt::format("{}:{}", options_.controller_address, options_.controller_port)
                                       : fmt::format("{}:PORT", options_.controller_address),
                                   "--socket-dir",
                                   options_.agent_dir,
                                   "--run-dir",
                                   options_.run_dir};
  // A simulated node is a label of its own on this machine (its ranks find
  // it by HT_SIMULATED_NODES); a real host's agent takes the host's.
  if (cluster_.kind() == ClusterKind::kLocal) command.insert(command.end(), {"--label", fmt::format("node{}", node.id)});
  // Started by mpirun over ssh, an agent must not end with that session: a
  // cut of the host's link ends it, and the agent would then be gone when
  // the link is back (under Slurm a step's processes are its cgroup's, and
  // simulated nodes' agents are htrun's own children).
  if (cluster_.kind() == ClusterKind::kHostfile) command.push_back("--detach");
  return cluster_.on_node(node, command, options_.launcher_args, options_.connect_timeout_s);
}

std::vector<std::string> Supervisor::agents_command(const std::vector<Node>& nodes) const {
  if (nodes.size() < 2) return {};
  std::vector<std::string> command = agent_command(nodes.front());
  // The agent's own command (after the launcher's words), with --node N
  // made into the table each agent finds itself in.
  const std::vector<std::string> own = cluster_.on_node(nodes.front(), {}, options_.launcher_args,
                                                        options_.connect_timeout_s);
  command.erase(command.begin(), command.begin() + std::ptrdiff_t(own.size()));
  const auto at = std::find(command.begin(), command.end(), "--node");
  std::vector<std::string> ids, hosts;
  for (const Node& n : nodes) {
    ids.push_back(std::to_string(n.id));
    hosts.push_back(n.host);
  }
  *at = "--nodes";
  *(at + 1) = fmt::format("{}", fmt::join(ids, ","));
  command.insert(at + 2, {"--hosts", fmt::format("{}", fmt::join(hosts, ","))});
  return cluster_.on_nodes(nodes, command, options_.launcher_args, options_.connect_timeout_s);
}

void Supervisor::start_agents(const std::vector<Node>& nodes) {
  if (const std::vector<std::string> argv = agents_command(nodes); !argv.empty()) {
    // One launch for all: at thousands of hosts, thousands of launchers
    // (srun clients, mpirun and ssh) would be the slowest part of a start.
    agent_group_ = spawner_->agents(argv, secret_, (fs::path(options_.run_dir) / "agents.log").string());
    if (agent_group_) {
      const double t = now();
      for (const Node& n : nodes) {
        agent_group_nodes_.insert(n.id);
        agent_started_s_[n.id] = t;
      }
      return;
    }
  }
  for (const Node& n : nodes) ensure_agent(n);
}

void Supervisor::ensure_agent(const Node& node) {
  if (const AgentState* a = controller_->agent(node.id); a && a->connected) return;
  const double t = now();
  const double age = t - agent_started_s_[node.id];
  // Still on its way (a remote start takes a launcher and an ssh), or
  // just tried: leave it.
  const auto on_its_way = [&](Process& p) {
    return age < kAgentRestartS || (!p.poll() && age < options_.agent_timeout_s);
  };
  if (agent_group_nodes_.count(node.id)) {
    if (on_its_way(*agent_group_)) return;
    agent_group_nodes_.erase(node.id);  // started alone from now on; the others' agents stay
  }
  const auto it = agent_processes_.find(node.id);
  if (it != agent_processes_.end()) {
    if (on_its_way(*it->second)) return;
    it->second->stop(0);
  }
  agent_processes_[node.id] = spawner_->agent(
      node, agent_command(node), secret_, (fs::path(options_.run_dir) / fmt::format("agent_node{}.log", node.id)).string());
  agent_started_s_[node.id] = t;
}

std::vector<Node> Supervisor::wait_for_agents(const std::vector<Node>& nodes) {
  const double deadline = now() + options_.agent_timeout_s;
  std::vector<Node> missing = nodes;
  for (;;) {
    std::erase_if(missing, [&](const Node& n) {
      const AgentState* a = controller_->agent(n.id);
      return a && a->connected;
    });
    if (missing.empty() || now() >= deadline) return missing;
    for (const Node& n : missing) ensure_agent(n);
    wait(0.02);
  }
}

bool Supervisor::agents_ready(Report& report) {
  for (;;) {
    const std::vector<Node> missing = wait_for_agents(active_);
    if (missing.empty()) return true;
    for (const Node& node : missing) {
      const std::string log = (fs::path(options_.run_dir) / fmt::format("agent_node{}.log", node.id)).string();
      cordoned_.push_back({.node = node, .at = now()});
      if (const std::string warning = cluster_.cordon(node, "its node agent never connected"); !warning.empty())
        std::fprintf(stderr, "htrun: warning: %s\n", warning.c_str());
      auto it = std::find_if(active_.begin(), active_.end(), [&](const Node& n) { return n.id == node.id; });
      // A spare whose agent is connected, else any (its agent is waited for next).
      auto spare = std::find_if(spares_.begin(), spares_.end(), [&](const Node& n) {
        const AgentState* a = controller_->agent(n.id);
        return a && a->connected;
      });
      if (spare == spares_.end()) spare = spares_.begin();
      if (spare != spares_.end()) {
        std::fprintf(stderr, "htrun: the agent of %s did not connect within %g s (see %s): cordoned, spare %s brought in\n",
                     cluster_.name(node).c_str(), options_.agent_timeout_s, log.c_str(), cluster_.name(*spare).c_str());
        *it = *spare;
        spares_.erase(spare);
      } else if (options_.allow_shrink && active_.size() > 1) {
        std::fprintf(stderr, "htrun: the agent of %s did not connect within %g s (see %s): cordoned; continuing on %zu node(s)\n",
                     cluster_.name(node).c_str(), options_.agent_timeout_s, log.c_str(), active_.size() - 1);
        active_.erase(it);
      } else {
        report.verdict = fmt::format("the node agent of {} did not connect within {:g} s (see {}) and no spare is left",
                                     cluster_.name(node), options_.agent_timeout_s, log);
        return false;
      }
    }
    std::sort(active_.begin(), active_.end(), [](const Node& a, const Node& b) { return a.id < b.id; });
  }
}

double Supervisor::command_all(const std::vector<Node>& nodes, const std::vector<Node>& told,
                               const std::function<wire::Message(const Node&, std::uint32_t)>& make,
                               std::vector<int>* missing) {
  std::map<std::uint32_t, int> waiting;  // request -> node id
  for (const Node& n : told)
    if (const AgentState* a = controller_->agent(n.id); a && a->connected)
      controller_->send(n.id, make(n, controller_->next_request()));
  for (const Node& n : nodes) {
    const AgentState* a = controller_->agent(n.id);
    if (!a || !a->connected) {
      if (missing) missing->push_back(n.id);
      continue;
    }
    const std::uint32_t request = controller_->next_request();
    if (controller_->send(n.id, make(n, request))) waiting[request] = n.id;
  }
  const double start = now(), deadline = start + options_.ack_timeout_s;
  double last = start;
  while (!waiting.empty() && now() < deadline) {
    wait(0.005);
    std::erase_if(waiting, [&](const auto& entry) {
      const auto it = acks_.find(entry.first);
      if (it == acks_.end() || !it->second.count(entry.second)) return false;
      acks_.erase(it);
      last = now();
      return true;
    });
  }
  for (const auto& [request, node] : waiting) {
    if (missing) missing->push_back(node);
    acks_.erase(request);
  }
  return last - start;
}

std::uint32_t Supervisor::request_health(const Node& node) {
  const AgentState* a = controller_->agent(node.id);
  if (!a || !a->connected) return 0;
  std::vector<std::string> check{options_.health_tool, "--node",     std::to_string(node.id), "--checks",
                                 "compute,memory,disk", "--ckpt-dir", protocol::checkpoint_dir(options_.run_dir)};
  check.insert(check.end(), options_.health_args.begin(), options_.health_args.end());
  const std::uint32_t request = controller_->next_request();
  const bool sent = controller_->send(
      node.id, wire::HealthCheck{.request = request, .argv = check, .timeout_ms = int(options_.health_timeout_s * 1000)});
  return sent ? request : 0;
}

std::vector<LinkTestRun> Supervisor::start_link_tests(const std::vector<Node>& nodes,
                                                      const std::function<int(int)>& index_of) {
  std::vector<LinkTestRun> runs;
  for (const Node& n : nodes) {
    // Only agents that speak: a silent one (a host cut off) is not a link to measure.
    const AgentState* a = controller_->agent(n.id);
    if (!a || !a->connected || now() - a->heard_s > options_.unreachable_after_s) continue;
    const std::uint32_t request = controller_->next_request();
    if (!controller_->send(n.id, wire::LinkTest{.request = request, .bytes = kLinkTestBytes})) continue;
    runs.push_back({.request = request, .node = n.id, .index = index_of(n.id), .bytes = kLinkTestBytes,
                    .sent_s = now(), .done_s = 0});
  }
  return runs;
}

void Supervisor::take_link_echoes(std::vector<LinkTestRun>& runs) {
  for (LinkTestRun& r : runs)
    if (const auto done = link_done_.find(r.request); r.done_s <= 0 && done != link_done_.end()) {
      r.done_s = done->second;
      link_done_.erase(done);
    }
}

void Supervisor::log_health(int node, const wire::HealthResult& result) const {
  std::ofstream(fs::path(options_.run_dir) / fmt::format("health_node{}.txt", node), std::ios::app)
      << result.output_tail << (result.output_tail.empty() || result.output_tail.back() == '\n' ? "" : "\n")
      << fmt::format("(exit {})\n", result.exit_code);
}

std::vector<bool> Supervisor::nodes_healthy(const std::vector<Node>& nodes) {
  // Every node at once, each under the health timeout. A node whose agent
  // is gone gets one started again; one that does not connect within the
  // connect timeout (plus a start's few seconds) fails. Beside ht-health,
  // which sees a host alone, every node's link is tested against the
  // others' (the active nodes and the spares as references): a host whose
  // link is far slower fails too (a gray failure).
  if (nodes.empty()) return {};
  const double start = now(), connect_by = start + options_.connect_timeout_s + 5,
               deadline = start + options_.health_timeout_s;
  std::vector<Node> linked = active_;
  linked.insert(linked.end(), spares_.begin(), spares_.end());
  for (const Node& n : nodes)
    if (std::none_of(linked.begin(), linked.end(), [&](const Node& l) { return l.id == n.id; })) linked.push_back(n);
  std::vector<LinkTestRun> links = start_link_tests(linked, [](int) { return -1; });
  std::vector<std::uint32_t> requests(nodes.size(), 0);
  std::vector<std::optional<bool>> healthy(nodes.size());
  for (;;) {
    take_link_echoes(links);
    bool done = link_tests_settled(links, now(), kLinkTestTimeoutS);
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      if (healthy[k]) continue;
      done = false;
      if (requests[k] == 0) {
        ensure_agent(nodes[k]);
        requests[k] = request_health(nodes[k]);
        // An agent started for this check whose start already failed (the
        // host does not answer its launcher) fails the check at once.
        const int id = nodes[k].id;
        const bool start_failed = requests[k] == 0 && agent_started_s_[id] >= start && agent_processes_.count(id) &&
                                  agent_processes_[id]->poll() && agent_processes_[id]->exit_code() != 0;
        if (requests[k] == 0 && (now() > connect_by || start_failed)) healthy[k] = false;
        continue;
      }
      if (const auto it = health_results_.find(requests[k]); it != health_results_.end()) {
        log_health(nodes[k].id, it->second);
        healthy[k] = it->second.exit_code == 0;
        health_results_.erase(it);
      } else if (const AgentState* a = controller_->agent(nodes[k].id);
                 !a->connected || now() - a->heard_s > options_.unreachable_after_s || now() > deadline) {
        healthy[k] = false;  // its agent went away or silent with the check, or it took too long
      }
    }
    if (done) break;
    wait(0.02);
  }
  std::vector<bool> out;
  double median = 0;
  const std::map<int, double> rates = link_rates(links, now(), &median);
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const auto rate = rates.find(nodes[k].id);
    const bool slow = links.size() >= 3 && rate != rates.end() && rate->second * kSlowLinkFactor < median;
    if (rate != rates.end())
      log_health(nodes[k].id, wire::HealthResult{
                                  .request = 0,
                                  .exit_code = slow ? 1 : 0,
                                  .output_tail = fmt::format("link: {:.0f} KB/s, the median of the {} nodes tested "
                                                             "{:.0f} KB/s{}\n",
                                                             rate->second / 1000, links.size(), median / 1000,
                                                             slow ? ": too slow" : "")});
    out.push_back(*healthy[k] && !slow);
  }
  return out;
}

void Supervisor::poll_readmissions() {
  if (!options_.health) return;
  for (const Node& n : nodes_to_readmit(cordoned_, now(), options_.readmit_after_s)) {
    if (readmit_checks_.count(n.id) || now() < cordoned(n.id)->retry_at) continue;
    ensure_agent(n);  // a host that comes back after a crash needs its agent again
    if (const std::uint32_t request = request_health(n)) readmit_checks_[n.id] = {request, now()};
  }
  for (auto it = readmit_checks_.begin(); it != readmit_checks_.end();) {
    const auto [request, started_at] = it->second;
    const int id = it->first;
    const auto result = health_results_.find(request);
    const bool over_time = now() - started_at > options_.health_timeout_s;
    if (result == health_results_.end() && !over_time) {
      // Its agent went away with the check (a host back from a cut may
      // lose the agent its launcher's session started): ask again, of the
      // agent that comes next.
      if (const AgentState* a = controller_->agent(id); !a || !a->connected) it = readmit_checks_.erase(it);
      else ++it;
      continue;
    }
    const int code = result == health_results_.end() ? -1 : result->second.exit_code;
    if (result != health_results_.end()) {
      log_health(id, result->second);
      health_results_.erase(result);
    }
    it = readmit_checks_.erase(it);
    Cordoned* c = cordoned(id);
    if (!c) continue;  // readmitted meanwhile
    if (code == 0) {
      readmit(Node(c->node));  // a copy: readmit removes it from cordoned_
      continue;
    }
    std::fprintf(stderr, "htrun: %s is not back yet (its health check %s); next look in %g s\n",
                 cluster_.name(c->node).c_str(), code < 0 ? "took too long" : fmt::format("exited {}", code).c_str(),
                 options_.readmit_after_s);
    c->retry_at = now() + options_.readmit_after_s;
  }
}

Cordoned* Supervisor::cordoned(int id) {
  const auto it = std::find_if(cordoned_.begin(), cordoned_.end(), [&](const Cordoned& c) { return c.node.id == id; });
  return it == cordoned_.end() ? nullptr : &*it;
}

void Supervisor::readmit(const Node& node) {
  // What earlier launches left on it is ended by its agent: at the Welcome
  // of its reconnection, and at the next launch, which every agent is told.
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
    const std::string why = cordon_anyway ? "a persistent straggler"
                            : skipped     ? "was lost"
                                          : "failed its health check";
    cordoned_.push_back({.node = node, .at = now()});
    // A node declared lost speaks for nothing until its agent proves itself
    // anew (a host cut off keeps a connection open until TCP gives up).
    if (skipped && incident.kind == IncidentKind::kHostLost) controller_->disconnect(node.id);
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

void Supervisor::stop_agents() {
  if (!controller_) return;
  for (const Node& n : all_nodes()) controller_->send(n.id, wire::Bye{});
  const double deadline = now() + 2;
  for (auto& [id, process] : agent_processes_)
    while (!process->poll() && now() < deadline) wait(0.02);
  for (auto& [id, process] : agent_processes_) {
    process->stop(0);
    process->finish(0.5);
  }
  agent_processes_.clear();
  if (agent_group_) {
    while (!agent_group_->poll() && now() < deadline) wait(0.02);
    agent_group_->stop(0);
    agent_group_->finish(0.5);
    agent_group_.reset();
    agent_group_nodes_.clear();
  }
  // Simulated nodes' sockets are this machine's, and gone with their agents.
  if (cluster_.kind() == ClusterKind::kLocal) {
    std::error_code ignored;
    fs::remove(options_.agent_dir, ignored);
  }
}

}  // namespace htrun
