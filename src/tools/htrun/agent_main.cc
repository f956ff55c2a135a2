// ht-agent: htrun's node agent (htrun/agent.h). htrun starts one on every
// host of a job, itself; the job's secret comes on standard input (one line
// of 64 hex digits), never on the command line.
//
//   ht-agent --node N --controller HOST:PORT --socket-dir DIR [--run-dir DIR] [--label L]
#include <CLI/CLI.hpp>
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
    return agent.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
