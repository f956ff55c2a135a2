// How the supervisor starts what it runs: the job's launcher and the node
// agents. ProcessSpawner starts real processes; tests and the scale bench
// give one of their own (simulated hosts), so the supervisor's decisions
// run unchanged against them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "htrun/cluster.h"
#include "htrun/process.h"
#include "htrun/wire.h"

namespace htrun {

class Spawner {
 public:
  virtual ~Spawner() = default;
  /// The job's launcher: `argv` with `env` ("NAME=value") added to the
  /// environment; its output to `log_path` and to htrun's, each line given
  /// to `parser`.
  virtual std::unique_ptr<Process> launch(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                          const std::string& log_path, Process::LineParser parser) = 0;
  /// The node agent of `node`: `argv` runs it there (the cluster's own way
  /// to reach the node around an ht-agent command); `secret` goes to its
  /// standard input; its output to `log_path`.
  virtual std::unique_ptr<Process> agent(const Node& node, const std::vector<std::string>& argv,
                                         const wire::Secret& secret, const std::string& log_path) = 0;
  /// The agents of several nodes by one launch: `argv` (Cluster::on_nodes)
  /// reaches every node, and each agent finds its own. nullptr where the
  /// spawner starts each agent alone (the default): the supervisor then
  /// calls agent() for each node.
  virtual std::unique_ptr<Process> agents(const std::vector<std::string>& argv, const wire::Secret& secret,
                                          const std::string& log_path) {
    (void)argv, (void)secret, (void)log_path;
    return nullptr;
  }
};

/// Real processes (ChildProcess): the job's output is echoed, an agent's is not.
class ProcessSpawner : public Spawner {
 public:
  std::unique_ptr<Process> launch(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                  const std::string& log_path, Process::LineParser parser) override;
  std::unique_ptr<Process> agent(const Node& node, const std::vector<std::string>& argv, const wire::Secret& secret,
                                 const std::string& log_path) override;
  std::unique_ptr<Process> agents(const std::vector<std::string>& argv, const wire::Secret& secret,
                                  const std::string& log_path) override;
};

}  // namespace htrun
