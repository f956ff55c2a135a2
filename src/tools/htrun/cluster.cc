// htrun's node sources and launchers: local, hostfile, Slurm.
#include "htrun/cluster.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>

namespace htrun {
namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// Runs a shell command (at most 60 s: a Slurm controller that does not
/// answer must not stop htrun) and returns its output; throws if it fails.
std::string capture(const std::string& command) {
  FILE* p = ::popen(("timeout 60 " + command + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error(fmt::format("htrun: cannot run '{}'", command));
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0)
    throw std::runtime_error(fmt::format("htrun: '{}' failed (exit {}{}): {}", command, code,
                                         code == 124 ? ", timed out after 60 s" : "", out));
  return out;
}

std::vector<std::string> hosts_of(const std::vector<Node>& nodes) {
  std::vector<std::string> out;
  for (const Node& n : nodes) out.push_back(n.host);
  return out;
}

/// mpirun passes its own environment only to ranks on its own machine;
/// these variables (hypertrain's, and the threading and device settings) go
/// to the other machines by name, sorted: those of htrun's environment and
/// those the launch sets (`launch_env`, "NAME=value").
std::vector<std::string> exported_env_flags(const std::vector<std::string>& launch_env) {
  static const char* const kPrefixes[] = {"HT_", "OMP_", "OPENBLAS_", "NCCL_", "CUDA_VISIBLE_DEVICES"};
  std::vector<std::string> names;
  std::vector<std::string> entries(launch_env);
  for (char** e = environ; *e; ++e) entries.emplace_back(*e);
  for (const std::string& entry : entries) {
    const std::string name = entry.substr(0, entry.find('='));
    for (const char* prefix : kPrefixes)
      if (name.rfind(prefix, 0) == 0) {
        names.push_back(name);
        break;
      }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::string> flags;
  for (const std::string& name : names) flags.insert(flags.end(), {"-x", name});
  return flags;
}

// A count of slots or tasks: decimal digits only, in [1, kMaxCount] (a
// bigger number, or one that overflows int, is a damaged file or a typo).
constexpr int kMaxCount = 1000000;
std::optional<int> parse_count(std::string_view digits) {
  if (digits.empty() || digits.size() > 7) return std::nullopt;
  int v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < 1 || v > kMaxCount) return std::nullopt;
  return v;
}

}  // namespace

// Slurm's compressed list: comma-separated "N" or "N(xR)" (N tasks on each
// of R nodes), e.g. "2(x3),1" for three nodes of 2 tasks then one of 1.
int slurm_tasks_per_node(const std::string& text) {
  const auto malformed = [&] {
    return std::runtime_error(fmt::format(
        "htrun: SLURM_TASKS_PER_NODE='{}' is not a list of task counts like '2(x3),1' (each count in [1, {}])", text,
        kMaxCount));
  };
  std::set<int> counts;
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (const std::size_t paren = item.find('('); paren != std::string_view::npos) {
      const std::string_view repeat = item.substr(paren);
      if (repeat.size() < 4 || repeat.substr(0, 2) != "(x" || repeat.back() != ')' ||
          !parse_count(repeat.substr(2, repeat.size() - 3)))
        throw malformed();
      item = item.substr(0, paren);
    }
    const std::optional<int> count = parse_count(item);
    if (!count) throw malformed();
    counts.insert(*count);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (counts.size() > 1)
    throw std::runtime_error(fmt::format(
        "htrun: the allocation has different task counts per node (SLURM_TASKS_PER_NODE={}); ask for the same "
        "number on every node (--ntasks-per-node)",
        text));
  return *counts.begin();
}

Cluster Cluster::local(int nodes) {
  Cluster c;
  c.kind_ = ClusterKind::kLocal;
  for (int i = 0; i < nodes; ++i) c.nodes_.push_back({i, ""});
  return c;
}

Cluster Cluster::of_kind(ClusterKind kind) {
  Cluster c;
  c.kind_ = kind;
  return c;
}

Cluster Cluster::from_hostfile(const std::string& path, int* slots) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("htrun: cannot read the hostfile {}", path));
  Cluster c;
  c.kind_ = ClusterKind::kHostfile;
  int common_slots = -1;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    int host_slots = 1;
    while (words >> word) {
      if (word.rfind("slots=", 0) == 0) {
        const std::optional<int> n = parse_count(std::string_view(word).substr(6));
        if (!n)
          throw std::runtime_error(fmt::format("htrun: {}:{}: '{}' is not 'slots=N' with N in [1, {}]", path, number,
                                               word, kMaxCount));
        host_slots = *n;
      } else if (word.rfind("max_slots=", 0) != 0) {
        throw std::runtime_error(fmt::format("htrun: {}:{}: '{}' is not 'slots=N' or 'max_slots=N'", path, number, word));
      }
    }
    if (common_slots >= 0 && host_slots != common_slots)
      throw std::runtime_error(fmt::format(
          "htrun: {}:{}: {} has {} slots where earlier hosts have {}; htrun needs the same slots on every node "
          "(a node is replaced by a spare of the same size)",
          path, number, host, host_slots, common_slots));
    common_slots = host_slots;
    c.nodes_.push_back({int(c.nodes_.size()), host});
  }
  if (c.nodes_.empty()) throw std::runtime_error(fmt::format("htrun: the hostfile {} names no host", path));
  *slots = common_slots;
  return c;
}

Cluster Cluster::from_slurm(int* slots) {
  const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
  if (!nodelist || !*nodelist)
    throw std::runtime_error("htrun: SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not: run htrun inside the "
                             "allocation (sbatch or salloc), or pass --local to ignore Slurm");
  Cluster c;
  c.kind_ = ClusterKind::kSlurm;
  std::istringstream hosts(capture("scontrol show hostnames " + shell_quote(nodelist)));
  for (std::string host; hosts >> host;) c.nodes_.push_back({int(c.nodes_.size()), host});
  if (c.nodes_.empty()) throw std::runtime_error(fmt::format("htrun: the allocation's node list '{}' is empty", nodelist));
  // Tasks per node: htrun needs the same count on every node (a spare
  // replaces a node of the same size).
  if (const char* per_node = std::getenv("SLURM_TASKS_PER_NODE"); per_node && *per_node)
    *slots = slurm_tasks_per_node(per_node);
  return c;
}

std::string node_name(const Node& node) {
  return node.host.empty() ? fmt::format("node {}", node.id) : fmt::format("node {} ({})", node.id, node.host);
}

std::string Cluster::name(const Node& node) const { return node_name(node); }

std::string Cluster::describe() const {
  switch (kind_) {
    case ClusterKind::kLocal: return fmt::format("{} simulated node(s) on this machine", nodes_.size());
    case ClusterKind::kHostfile: return fmt::format("hostfile: {}", fmt::join(hosts_of(nodes_), ","));
    case ClusterKind::kSlurm:
      return fmt::format("Slurm job {}: {}", std::getenv("SLURM_JOB_ID") ? std::getenv("SLURM_JOB_ID") : "?",
                         fmt::join(hosts_of(nodes_), ","));
  }
  return "";
}

std::vector<std::string> Cluster::job_command(const std::vector<Node>& active, int slots,
                                              const std::vector<std::string>& program,
                                              const std::vector<std::string>& launcher_args,
                                              const std::vector<std::string>& env) const {
  const std::string ranks = std::to_string(int(active.size()) * slots);
  // When a rank dies, mpirun ends the others with TERM and, a second later,
  // KILL. The ranks take TERM as a preemption, which cannot finish with a
  // peer gone, so that second (1.7 s in all, measured) is lost on every
  // crash: KILL at once. Ranks that leave together on purpose record their
  // exit before their last collective (RankGuard::record_exit).
  const std::vector<std::string> kill_at_once{"--mca", "odls_base_sigkill_timeout", "0"};
  std::vector<std::string> cmd;
  switch (kind_) {
    case ClusterKind::kLocal:
      cmd = {mpirun_, "-np", ranks, "--oversubscribe", "--bind-to", "none"};
      cmd.insert(cmd.end(), kill_at_once.begin(), kill_at_once.end());
      break;
    case ClusterKind::kHostfile: {
      std::vector<std::string> hosts;
      for (const Node& n : active) hosts.push_back(fmt::format("{}:{}", n.host, slots));
      // By slot: a node's ranks are consecutive, in the order of --host.
      cmd = {mpirun_, "-np", ranks, "--host", fmt::format("{}", fmt::join(hosts, ",")), "--map-by", "slot"};
      cmd.insert(cmd.end(), kill_at_once.begin(), kill_at_once.end());
      for (const std::string& flag : exported_env_flags(env)) cmd.push_back(flag);
      break;
    }
    case ClusterKind::kSlurm:
      // Block distribution over the nodes in Slurm's order (htrun keeps
      // `active` in that order); a rank killed by a signal ends the step.
      // --overlap: a step that lost a node never completes in Slurm's
      // accounting (the node does not report it done), and would hold its
      // CPUs on the surviving nodes against the next step ("Requested nodes
      // are busy"); htrun runs one step at a time, so sharing them is safe.
      // --no-kill: a node that fails does not end the allocation.
      cmd = {"srun",
             "--overlap",
             "--no-kill",
             fmt::format("--nodes={}", active.size()),
             fmt::format("--ntasks={}", ranks),
             fmt::format("--ntasks-per-node={}", slots),
             fmt::format("--nodelist={}", fmt::join(hosts_of(active), ",")),
             "--distribution=block",
             "--kill-on-bad-exit=1",
             "--mpi=pmix"};
      break;
  }
  cmd.insert(cmd.end(), launcher_args.begin(), launcher_args.end());
  cmd.insert(cmd.end(), program.begin(), program.end());
  return cmd;
}

std::vector<std::string> Cluster::job_env() const {
  if (kind_ == ClusterKind::kLocal) return {"OMPI_MCA_rmaps_base_oversubscribe=1"};
  return {};
}

std::vector<std::string> Cluster::on_node(const Node& node, const std::vector<std::string>& command,
                                          const std::vector<std::string>& launcher_args,
                                          double connect_timeout_s) const {
  if (kind_ == ClusterKind::kLocal) return command;
  return on_nodes({node}, command, launcher_args, connect_timeout_s);
}

std::vector<std::string> Cluster::on_nodes(const std::vector<Node>& nodes, const std::vector<std::string>& command,
                                           const std::vector<std::string>& launcher_args,
                                           double connect_timeout_s) const {
  const std::string tasks = std::to_string(nodes.size());
  std::vector<std::string> cmd;
  switch (kind_) {
    case ClusterKind::kLocal: return {};
    case ClusterKind::kHostfile: {
      // A host that does not answer fails within the connect timeout, and
      // one that stops answering within a few keep-alives.
      std::vector<std::string> hosts;
      for (const Node& n : nodes) hosts.push_back(n.host + ":1");
      cmd = {mpirun_, "-np", tasks, "--host", fmt::format("{}", fmt::join(hosts, ",")), "--mca", "plm_rsh_args",
             fmt::format("-o ConnectTimeout={} -o ServerAliveInterval=2 -o ServerAliveCountMax=2",
                         std::max(1, int(connect_timeout_s)))};
      if (nodes.size() > 1) cmd.insert(cmd.end(), {"--map-by", "node", "--stdin", "all"});
      for (const std::string& flag : exported_env_flags({})) cmd.push_back(flag);
      break;
    }
    case ClusterKind::kSlurm:
      cmd = {"srun", fmt::format("--nodes={}", tasks), fmt::format("--ntasks={}", tasks),
             "--nodelist=" + fmt::format("{}", fmt::join(hosts_of(nodes), ",")), "--overlap"};
      // One task's node failing must not end the others' (--no-kill), and
      // each task reads the same standard input.
      if (nodes.size() > 1) cmd.insert(cmd.end(), {"--ntasks-per-node=1", "--no-kill", "--input=all"});
      break;
  }
  cmd.insert(cmd.end(), launcher_args.begin(), launcher_args.end());
  cmd.insert(cmd.end(), command.begin(), command.end());
  return cmd;
}

std::string Cluster::cordon(const Node& node, const std::string& reason) const {
  if (kind_ != ClusterKind::kSlurm) return "";
  // A node whose slurmd no longer answers (Slurm marks its state with '*')
  // is set DOWN first: Slurm then ends the steps it still holds of the job
  // (a node that died mid-step never reports its step done). A node that
  // answers is only drained: DOWN would also end an allocation made without
  // --no-kill, and its slurmd ends its steps itself. DRAIN keeps it out until
  // a person resumes it.
  std::vector<const char*> states{"DRAIN"};
  try {
    const std::string state = capture(fmt::format("sinfo -h -N -n {} -o %t", shell_quote(node.host)));
    if (state.find('*') != std::string::npos) states.insert(states.begin(), "DOWN");
  } catch (const std::exception&) {
  }
  std::string warning;
  for (const char* state : states) {
    const std::string cmd = fmt::format("scontrol update NodeName={} State={} Reason={}", shell_quote(node.host), state,
                                        shell_quote("htrun: " + reason));
    try {
      capture(cmd);
    } catch (const std::exception& e) {
      warning = fmt::format("could not mark {} {} in Slurm ({}); htrun will not use it again either way", node.host,
                            state, e.what());
    }
  }
  return warning;
}

int Cluster::probe_port() const {
  switch (kind_) {
    case ClusterKind::kHostfile: return 22;
    case ClusterKind::kSlurm: return 6818;
    case ClusterKind::kLocal: return 0;
  }
  return 0;
}

LauncherEvent Cluster::launcher_event(const std::string& line) const {
  // Open MPI: "mpirun noticed that process rank 2 with PID 123 on node vm exited on signal 9 (Killed)."
  static const std::regex mpirun_dead(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal)");
  // srun: "srun: error: n1: task 2: Killed". With --kill-on-bad-exit the
  // other tasks follow as "Terminated": the cause is the first line.
  static const std::regex srun_dead(R"(srun: error: \S+: tasks? (\d+)[-,\d]*: (Killed|Segmentation fault|Aborted|Bus error))");
  // A host gone. Open MPI's rank-side report of a peer that disconnected
  // ("  Peer host:  h2"), its daemon-side report ("  Remote daemon: [[1,0],2]
  // on node h2"); ssh's, the launcher's transport ("Connection to h2 closed
  // by remote host.", "Timeout, server h2 not responding.", "ssh: connect to
  // host h2 port 22: No route to host"); Slurm's ("srun: error: Node failure
  // on h2").
  static const std::regex host_lost(
      R"((?:^\s*Peer host:\s+(\S+)\s*$)|(?:Remote daemon:.* on node (\S+))|(?:Connection to (\S+) closed by remote host)|)"
      R"((?:Timeout, server (\S+) not responding)|(?:ssh: connect to host (\S+) port \d+:)|(?:Node failure on (\S+)))");
  LauncherEvent e;
  std::smatch m;
  if (std::regex_search(line, m, kind_ == ClusterKind::kSlurm ? srun_dead : mpirun_dead)) {
    // A rank no launcher would print (too many digits) is not one.
    e.rank = parse_count(m.str(1)).value_or(-1);
    if (m.str(1) == "0") e.rank = 0;
    return e;
  }
  if (kind_ != ClusterKind::kLocal && std::regex_search(line, m, host_lost))
    for (std::size_t g = 1; g < m.size(); ++g)
      if (m[g].matched) {
        e.host = m[g];
        while (!e.host.empty() && (e.host.back() == '.' || e.host.back() == ',')) e.host.pop_back();
        break;
      }
  return e;
}

}  // namespace htrun
