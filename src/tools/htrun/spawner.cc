// htrun's real spawner (spawner.h).
#include "htrun/spawner.h"

#include "htrun/child_process.h"

namespace htrun {

std::unique_ptr<Process> ProcessSpawner::launch(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& env, const std::string& log_path,
                                                Process::LineParser parser) {
  return std::make_unique<ChildProcess>(argv, env, log_path, /*echo=*/true, std::move(parser));
}

std::unique_ptr<Process> ProcessSpawner::agent(const Node&, const std::vector<std::string>& argv,
                                               const wire::Secret& secret, const std::string& log_path) {
  return agents(argv, secret, log_path);
}

std::unique_ptr<Process> ProcessSpawner::agents(const std::vector<std::string>& argv, const wire::Secret& secret,
                                                const std::string& log_path) {
  return std::make_unique<ChildProcess>(argv, std::vector<std::string>{}, log_path, /*echo=*/false,
                                        Process::LineParser{}, wire::secret_hex(secret) + "\n");
}

}  // namespace htrun
