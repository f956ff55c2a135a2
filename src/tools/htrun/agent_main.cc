// ht-agent: htrun's node agent (htrun/agent.h). htrun starts one on every
// host of a job, itself; the job's secret comes on standard input (one line
// of 64 hex digits), never on the command line.
//
//   ht-agent --node N --controller HOST:PORT --socket-dir DIR [--run-dir DIR] [--label L] [--detach]
//
// --detach (htrun gives it on a hostfile, where mpirun and ssh start the
// agent): once listening, the agent leaves its launcher's session, so that
// a cut of the host's link, which ends that ssh session, does not end the
// agent with it; it writes to <run-dir>/agent_node<N>.log.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "ht/resilience/rank_guard.h"
#include "htrun/agent.h"

int main(int argc, char** argv) {
  htrun::AgentOptions o;
  std::string controller;
  CLI::App app{"ht-agent: htrun's node agent (started by htrun, one per host; the secret comes on stdin)"};
  app.add_option("--node", o.node, "the node id htrun gave this host")->required()->check(CLI::NonNegativeNumber);
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
      const pid_t pid = ::fork();
      if (pid < 0) std::perror("ht-agent: fork");
      if (pid > 0) ::_exit(0);  // the launcher's process is done; the agent goes on below
      if (pid == 0) {
        ::setsid();
        const std::string log = o.run_dir.empty() ? std::string("/dev/null")
                                                  : fmt::format("{}/agent_node{}.log", o.run_dir, o.node);
        const int in = ::open("/dev/null", O_RDONLY), out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in >= 0) ::dup2(in, 0);
        if (out >= 0) ::dup2(out, 1), ::dup2(out, 2);
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
