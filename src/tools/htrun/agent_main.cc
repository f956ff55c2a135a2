// ht-agent: htrun's node agent (htrun/agent.h). htrun starts one on every
// host of a job, itself; the job's secret comes on standard input (one line
// of 64 hex digits), never on the command line.
//
//   ht-agent --node N --controller HOST:PORT --socket-dir DIR [--run-dir DIR] [--label L] [--detach]
//   ht-agent --nodes N,N,... --hosts H,H,... --controller ...
//
// The second form is one launch of every host's agent (Cluster::on_nodes):
// each finds its own node, under Slurm the one whose host is
// SLURMD_NODENAME, under mpirun the one at its task index
// (OMPI_COMM_WORLD_RANK, in the order of --host).
//
// --detach (htrun gives it on a hostfile, where mpirun and ssh start the
// agent): once listening, the agent leaves its launcher's session, so that
// a cut of the host's link, which ends that ssh session, does not end the
// agent with it; it writes to <run-dir>/agent_node<N>.log.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "ht/resilience/rank_guard.h"
#include "htrun/agent.h"

namespace {

// This host's node among those of one launch on every host, or nullopt
// having said why.
std::optional<int> own_node(const std::vector<int>& nodes, const std::vector<std::string>& hosts) {
  if (hosts.size() != nodes.size()) {
    std::fprintf(stderr, "ht-agent: --nodes names %zu node(s) and --hosts %zu: give one host a node\n", nodes.size(),
                 hosts.size());
    return std::nullopt;
  }
  if (const char* slurm_host = std::getenv("SLURMD_NODENAME"); slurm_host && *slurm_host) {
    const auto it = std::find(hosts.begin(), hosts.end(), slurm_host);
    if (it != hosts.end()) return nodes[std::size_t(it - hosts.begin())];
    std::fprintf(stderr, "ht-agent: this host, %s (SLURMD_NODENAME), is not among --hosts\n", slurm_host);
    return std::nullopt;
  }
  const char* task = std::getenv("OMPI_COMM_WORLD_RANK");
  char* end = nullptr;
  const long index = task ? std::strtol(task, &end, 10) : -1;
  if (!task || *end != '\0' || index < 0 || std::size_t(index) >= nodes.size()) {
    std::fprintf(stderr,
                 "ht-agent: --nodes needs its task's index from its launcher (OMPI_COMM_WORLD_RANK='%s', %zu "
                 "node(s)) or SLURMD_NODENAME; start one agent with --node N instead\n",
                 task ? task : "", nodes.size());
    return std::nullopt;
  }
  return nodes[std::size_t(index)];
}

}  // namespace

int main(int argc, char** argv) {
  htrun::AgentOptions o;
  std::string controller;
  CLI::App app{"ht-agent: htrun's node agent (started by htrun, one per host; the secret comes on stdin)"};
  std::vector<int> nodes;
  std::vector<std::string> hosts;
  auto* one = app.add_option("--node", o.node, "the node id htrun gave this host")->check(CLI::NonNegativeNumber);
  auto* all = app.add_option("--nodes", nodes, "started on every host at once: the node ids, in the launch's order")
                  ->delimiter(',')
                  ->excludes(one);
  app.add_option("--hosts", hosts, "with --nodes: their hosts, in the same order")->delimiter(',')->needs(all);
  app.add_option("--controller", controller, "htrun's address, HOST:PORT")->required();
  app.add_option("--socket-dir", o.socket_dir, "the directory of the ranks' socket (HT_AGENT_DIR)")->required();
  app.add_option("--run-dir", o.run_dir, "the run directory (its launch epoch is read while htrun is out of reach)");
  app.add_option("--label", o.label,
                 "the label the ranks find this agent by (default: SLURMD_NODENAME under Slurm, else the host name)");
  app.add_option("--linger", o.linger_s, "seconds without htrun after which the agent exits")->capture_default_str();
  bool detach = false;
  app.add_flag("--detach", detach, "leave the launcher's session once listening (writes to <run-dir>/agent_node<N>.log)");
  CLI11_PARSE(app, argc, argv);
  const auto colon = controller.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    std::fprintf(stderr, "ht-agent: --controller '%s' is not HOST:PORT\n", controller.c_str());
    return 2;
  }
  o.controller_host = controller.substr(0, colon);
  try {
    o.controller_port = std::stoi(controller.substr(colon + 1));
  } catch (const std::exception&) {
    std::fprintf(stderr, "ht-agent: --controller '%s' is not HOST:PORT\n", controller.c_str());
    return 2;
  }
  if (!*one && !*all) {
    std::fprintf(stderr, "ht-agent: give --node N, or --nodes and --hosts for one launch on every host\n");
    return 2;
  }
  if (*all) {
    const std::optional<int> node = own_node(nodes, hosts);
    if (!node) return 2;
    o.node = *node;
  }
  std::string line;
  std::getline(std::cin, line);
  const auto secret = htrun::wire::parse_secret_hex(line);
  if (!secret) {
    std::fprintf(stderr, "ht-agent: no job secret on standard input (htrun gives it: 64 hex digits)\n");
    return 2;
  }
  o.secret = *secret;
  if (o.label.empty()) o.label = ht::resilience::host_label();
  try {
    htrun::Agent agent(o);
    if (detach) {
      // The log is opened before the fork so that it exists once the
      // launcher's process has returned: whoever started the agent can look.
      const std::string log = o.run_dir.empty() ? std::string("/dev/null")
                                                : fmt::format("{}/agent_node{}.log", o.run_dir, o.node);
      const int in = ::open("/dev/null", O_RDONLY), out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      const pid_t pid = ::fork();
      if (pid < 0) {  // the agent goes on in the launcher's session
        std::perror("ht-agent: fork");
        if (in >= 0) ::close(in);
        if (out >= 0) ::close(out);
      }
      if (pid > 0) ::_exit(0);  // the launcher's process is done; the agent goes on below
      if (pid == 0) {
        ::setsid();
        if (in >= 0) ::dup2(in, 0), ::close(in);
        if (out >= 0) ::dup2(out, 1), ::dup2(out, 2), ::close(out);
      }
    }
    return agent.run();
  } catch (const htrun::AgentAlreadyRuns& e) {
    std::fprintf(stderr, "%s: it goes on\n", e.what());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
