// htrun: launches a training job, watches it, and carries it through
// failures by itself.
//
//   htrun [options] -- <program> [args]
//
// The node set is local: --nodes N simulated nodes of --slots M ranks each
// on this machine (a node is the group of ranks the supervisor can declare
// bad), plus --spares S. The job is `mpirun -np N*M <program> [args]
// --run-dir <run-dir> --resume auto`; the program must accept those two
// flags (gpt_train does) and write heartbeats and exit records there
// (ht::resilience::RankGuard).
//
// On a failure htrun stops every rank (TERM, then KILL), classifies it from
// the exit records, mpirun's report of a dead rank and the heartbeats
// (crash, hang, divergence, corruption, preemption), runs ht-health on the
// node involved, cordons a node that fails and brings in a spare (or, with
// --allow-shrink and no spare, continues on fewer nodes: the checkpoint is
// resharded to the smaller data-parallel size), and relaunches, resuming
// from the newest committed checkpoint; restarts are bounded, with back-off.
// At the end it prints and writes (<run-dir>/htrun_report.json) every
// incident with its detection latency, recovery time and steps lost, the
// cordoned nodes, the restarts, and goodput = productive time / wall time.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ht/ckpt/checkpoint.h"
#include "htrun/job.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

volatile sig_atomic_t g_stop_signal = 0;
void on_signal(int s) { g_stop_signal = s; }

struct Options {
  int nodes = 2, slots = 1, spares = 0;
  std::string run_dir = "runs/htrun";
  int max_restarts = 5;
  double backoff_s = 1, hang_timeout_s = 60, grace_s = 5;
  bool allow_shrink = false, health = true;
  std::string mpirun = "mpirun";
  std::string health_tool;  // default: ht-health next to htrun
  std::vector<std::string> program;
};

struct Heartbeat {
  int rank = -1;
  int pid = 0;
  std::int64_t step = 0;
  std::string phase;
  double time_s = 0, progress_s = 0;
};

std::map<int, Heartbeat> read_heartbeats(const std::string& run_dir) {
  std::map<int, Heartbeat> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "heartbeat", ec)) {
    if (e.path().extension() != ".json") continue;
    try {
      std::ifstream in(e.path());
      const json j = json::parse(in);
      Heartbeat h{j.at("rank").get<int>(),           j.at("pid").get<int>(),
                  j.at("step").get<std::int64_t>(),  j.at("phase").get<std::string>(),
                  j.at("time_ms").get<double>() / 1000, j.at("progress_ms").get<double>() / 1000};
      out[h.rank] = h;
    } catch (...) {
      // A heartbeat being replaced: the next poll reads it.
    }
  }
  return out;
}

std::vector<json> read_exit_records(const std::string& run_dir) {
  std::vector<json> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "exit", ec)) {
    if (e.path().extension() != ".json") continue;
    try {
      std::ifstream in(e.path());
      out.push_back(json::parse(in));
    } catch (...) {
    }
  }
  return out;
}

std::int64_t latest_checkpoint_step(const std::string& run_dir) {
  const auto committed = ht::ckpt::committed_checkpoints((fs::path(run_dir) / "checkpoints").string());
  return committed.empty() ? 0 : committed.back().step;
}

bool node_healthy(const Options& o, int node) {
  const std::string cmd = fmt::format("'{}' --node {} --checks compute,memory,disk --ckpt-dir '{}' > '{}' 2>&1",
                                      o.health_tool, node, (fs::path(o.run_dir) / "checkpoints").string(),
                                      (fs::path(o.run_dir) / fmt::format("health_node{}.txt", node)).string());
  const int rc = std::system(cmd.c_str());
  return rc == 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"htrun: launch a training job and keep it alive through failures"};
  app.add_option("--nodes", o.nodes, "simulated nodes on this machine")->check(CLI::PositiveNumber);
  app.add_option("--slots", o.slots, "ranks per node")->check(CLI::PositiveNumber);
  app.add_option("--spares", o.spares, "spare nodes brought in for cordoned ones")->check(CLI::NonNegativeNumber);
  app.add_option("--run-dir", o.run_dir, "run directory passed to the program (heartbeats, checkpoints, report)");
  app.add_option("--max-restarts", o.max_restarts, "relaunches before giving up");
  app.add_option("--backoff", o.backoff_s, "seconds before the first relaunch (doubling, at most 30)");
  app.add_option("--hang-timeout", o.hang_timeout_s, "seconds without progress in a rank's heartbeat that mean a hang");
  app.add_option("--grace", o.grace_s, "seconds between TERM and KILL when stopping the job");
  app.add_flag("--allow-shrink", o.allow_shrink, "with no spare left, continue on fewer nodes");
  app.add_flag("!--no-health", o.health, "skip ht-health before relaunching");
  app.add_option("--mpirun", o.mpirun, "the MPI launcher");
  app.add_option("--health-tool", o.health_tool, "ht-health (default: next to htrun)");
  app.add_option("program", o.program, "-- program [args]")->required();
  app.allow_extras(false);
  CLI11_PARSE(app, argc, argv);
  if (o.health_tool.empty())
    o.health_tool = (fs::canonical("/proc/self/exe").parent_path() / "ht-health").string();
  fs::create_directories(o.run_dir);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);

  std::vector<int> active;  // node labels in use, in rank order
  for (int n = 0; n < o.nodes; ++n) active.push_back(n);
  std::vector<int> spares;
  for (int n = 0; n < o.spares; ++n) spares.push_back(o.nodes + n);
  std::vector<int> cordoned;
  json incidents = json::array();
  const double wall_start = now_s();
  double productive_s = 0;
  int restarts = 0;
  int final_code = 1;
  std::string verdict;
  std::optional<json> pending;  // the last incident, waiting for its recovery time
  std::int64_t best_reached = 0;

  for (;;) {
    // A fresh launch: old heartbeats and exit records would mislead.
    fs::remove_all(fs::path(o.run_dir) / "heartbeat");
    fs::remove_all(fs::path(o.run_dir) / "exit");
    const int ranks = int(active.size()) * o.slots;
    const std::int64_t resume_step = latest_checkpoint_step(o.run_dir);
    std::vector<std::string> cmd{o.mpirun, "-np", std::to_string(ranks), "--oversubscribe", "--bind-to", "none"};
    cmd.insert(cmd.end(), o.program.begin(), o.program.end());
    cmd.insert(cmd.end(), {"--run-dir", o.run_dir, "--resume", "auto"});
    std::fprintf(stderr, "htrun: launch %d: %d node(s) [%s] x %d slot(s), resuming after step %lld\n", restarts + 1,
                 int(active.size()), fmt::format("{}", fmt::join(active, ",")).c_str(), o.slots,
                 (long long)resume_step);
    htrun::Job job(cmd, {"OMPI_MCA_rmaps_base_oversubscribe=1"}, (fs::path(o.run_dir) / "htrun_job.log").string());

    // Watch: the job's exit, a rank's stalled progress, our own TERM.
    std::string kind;
    int failed_rank = -1;
    double failed_at = 0, detected_at = 0;
    std::int64_t reached = resume_step, first_step = -1;
    double first_progress_s = 0, last_progress_s = 0;
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const auto beats = read_heartbeats(o.run_dir);
      for (const auto& [rank, h] : beats) {
        // Steps completed: the one in progress is not, unless it reports done.
        const std::int64_t done = h.phase == "step-done" ? h.step : h.step - 1;
        if (done > reached) {
          if (first_step < 0) {
            first_step = done;
            first_progress_s = h.progress_s;
          }
          reached = done;
          last_progress_s = h.progress_s;
        }
      }
      if (pending && first_progress_s > 0) {
        (*pending)["recovery_s"] = first_progress_s - (*pending)["detected_at"].get<double>();
        incidents.push_back(*pending);
        pending.reset();
      }
      if (job.poll()) {
        detected_at = now_s();
        break;
      }
      if (g_stop_signal) {
        kind = "preemption";
        // Pass the preemption on to the ranks themselves (SIGUSR1; mpirun
        // would kill them on TERM): they finish the step, save a checkpoint
        // and exit; then the job ends.
        for (const auto& [rank, h] : beats)
          if (h.pid > 0) ::kill(h.pid, SIGUSR1);
        const double deadline = now_s() + std::max(o.grace_s, 60.0);
        while (!job.poll() && now_s() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        job.stop(o.grace_s);
        detected_at = failed_at = now_s();
        break;
      }
      // A hang: progress stalled for the timeout. Peers blocked on the hung
      // rank stall a little later, so the rank that stopped first is named.
      for (const auto& [rank, h] : beats)
        if (h.phase != "start" && now_s() - h.progress_s > o.hang_timeout_s &&
            (failed_rank < 0 || h.progress_s < failed_at)) {
          kind = "hang";
          failed_rank = rank;
          failed_at = h.progress_s;
        }
      if (kind == "hang") {
        detected_at = now_s();
        job.stop(o.grace_s);
        break;
      }
    }
    // Productive time: the steps this launch added beyond any earlier launch,
    // at this launch's own step rate (steps redone after a failure are not).
    if (first_step >= 0 && reached > first_step) {
      const double per_step = (last_progress_s - first_progress_s) / double(reached - first_step);
      productive_s += per_step * double(std::max<std::int64_t>(0, reached - std::max(best_reached, resume_step)));
    }
    best_reached = std::max(best_reached, reached);
    const int code = job.exit_code();
    if (kind.empty() && code == 0) {
      final_code = 0;
      verdict = "the job finished";
      break;
    }
    // Classify from what the ranks said, then from mpirun's report.
    const std::vector<json> exits = read_exit_records(o.run_dir);
    if (kind.empty()) {
      for (const json& e : exits) {
        const std::string k = e.value("kind", "");
        if (k == "hang" || k == "divergence" || k == "corruption" || k == "preempted" || k == "error") {
          kind = k;
          failed_rank = e.value("rank", -1);
          failed_at = e.value("time_ms", 0.0) / 1000;
          break;
        }
      }
    }
    if (kind.empty()) {
      kind = "crash";
      failed_rank = job.dead_rank();
      failed_at = job.dead_time();  // when mpirun reported the death
    }
    if (failed_at == 0) failed_at = detected_at;
    const int failed_node = failed_rank >= 0 ? active[std::size_t(failed_rank / o.slots)] : -1;
    json incident{{"kind", kind},
                  {"rank", failed_rank},
                  {"node", failed_node},
                  {"exit_code", code},
                  {"time", detected_at - wall_start},
                  {"detected_at", detected_at},
                  {"detection_latency_s", std::max(0.0, detected_at - failed_at)},
                  {"steps_lost", std::max<std::int64_t>(0, reached - latest_checkpoint_step(o.run_dir))},
                  {"step_reached", reached}};
    std::fprintf(stderr, "htrun: %s of rank %d (node %d) detected after %.2f s; the job reached step %lld\n",
                 kind.c_str(), failed_rank, failed_node, incident["detection_latency_s"].get<double>(),
                 (long long)reached);
    if (kind == "preemption" || kind == "error") {
      incidents.push_back(incident);
      final_code = kind == "preemption" ? 77 : 2;
      verdict = kind == "preemption" ? "preempted: checkpoint saved, stopped"
                                     : "the program failed on its input (exit record kind 'error'); not retried";
      break;
    }
    // Health: the node involved (or every node when none is known).
    std::vector<int> suspects;
    if (failed_node >= 0)
      suspects.push_back(failed_node);
    else
      suspects = active;
    if (kind == "corruption") suspects = active;
    json checked = json::array();
    bool out_of_nodes = false;
    for (int node : suspects) {
      const bool ok = !o.health || node_healthy(o, node);
      checked.push_back({{"node", node}, {"healthy", ok}});
      if (ok) continue;
      cordoned.push_back(node);
      auto it = std::find(active.begin(), active.end(), node);
      if (!spares.empty()) {
        std::fprintf(stderr, "htrun: node %d failed its health check: cordoned, spare node %d brought in\n", node,
                     spares.front());
        *it = spares.front();
        spares.erase(spares.begin());
      } else if (o.allow_shrink && active.size() > 1) {
        std::fprintf(stderr, "htrun: node %d failed its health check: cordoned; no spare, continuing on %zu node(s)\n",
                     node, active.size() - 1);
        active.erase(it);
      } else {
        verdict = fmt::format("node {} is unhealthy and no spare is left (use --spares or --allow-shrink)", node);
        out_of_nodes = true;
        break;
      }
    }
    incident["health"] = checked;
    if (out_of_nodes) {
      incidents.push_back(incident);
      final_code = 1;
      break;
    }
    if (++restarts > o.max_restarts) {
      incidents.push_back(incident);
      verdict = fmt::format("gave up after {} restarts", o.max_restarts);
      final_code = 1;
      break;
    }
    pending = incident;
    std::this_thread::sleep_for(
        std::chrono::duration<double>(std::min(30.0, o.backoff_s * double(1 << std::min(restarts - 1, 5)))));
  }
  if (pending) incidents.push_back(*pending);
  const double wall = now_s() - wall_start;
  const json report{{"verdict", verdict},
                    {"exit_code", final_code},
                    {"wall_s", wall},
                    {"productive_s", productive_s},
                    {"goodput", wall > 0 ? productive_s / wall : 0.0},
                    {"restarts", restarts},
                    {"incidents", incidents},
                    {"cordoned_nodes", cordoned},
                    {"active_nodes", active},
                    {"spares_left", spares}};
  {
    std::ofstream out(fs::path(o.run_dir) / "htrun_report.json");
    out << report.dump(1) << "\n";
  }
  std::fprintf(stderr, "htrun report: %s; %d restart(s), %zu incident(s), cordoned [%s], goodput %.1f%% (%.1f s of %.1f s)\n",
               verdict.c_str(), restarts, incidents.size(), fmt::format("{}", fmt::join(cordoned, ",")).c_str(),
               100 * report["goodput"].get<double>(), productive_s, wall);
  for (const json& i : incidents)
    std::fprintf(stderr, "  %-11s rank %d node %d: detected in %.2f s, recovered in %s, %lld step(s) lost\n",
                 i["kind"].get<std::string>().c_str(), i["rank"].get<int>(), i["node"].get<int>(),
                 i["detection_latency_s"].get<double>(),
                 i.contains("recovery_s") ? fmt::format("{:.1f} s", i["recovery_s"].get<double>()).c_str() : "-",
                 (long long)i["steps_lost"].get<std::int64_t>());
  return final_code;
}
