// htrun: launches a training job, watches it, and carries it through
// failures by itself.
//
//   htrun [options] -- <program> [args]
//
// Nodes (htrun/cluster.h): --nodes N simulated nodes of --slots M ranks on
// this machine (plus --spares more); --hostfile FILE for real machines
// (mpirun --host); or, when SLURM_JOB_ID is set, the Slurm allocation (srun;
// bad nodes drained), whose last --spares hosts are held back. The job is
// `<launcher> <program> [args] --run-dir <run-dir> --resume auto`; the
// program must accept those two flags and write heartbeats and exit records
// there: every program built on ht::train::Job does (gpt_train, llama_train,
// examples/custom_program). The whole contract is docs/htrun.md. The run
// directory must be shared by every node.
//
// htrun starts a node agent (ht-agent) on every host first: the ranks report
// to it over a Unix socket, and it sends htrun a summary of its host's ranks
// every interval (docs/htrun.md, "Node agents").
// On a failure htrun stops every rank (TERM, then KILL), classifies it from
// the exit records, the launcher's report of a dead rank and the heartbeats
// (crash, hang, divergence, corruption, straggler, preemption), runs
// ht-health on the node involved, cordons a node that fails and brings in a
// spare (or, with --allow-shrink and no spare, continues on fewer nodes: the
// checkpoint is resharded to the smaller data-parallel size), and relaunches,
// resuming from the newest committed checkpoint; restarts are bounded, with
// none after a launch that made progress and a back-off that doubles while
// launches fail without it. At the end
// it prints and writes (<run-dir>/htrun_report.json) every incident with its
// detection latency, recovery time and steps lost, the cordoned nodes, the
// restarts, and goodput = productive time / wall time.
// Exit status: 0 the job finished, 77 preempted (checkpoint saved), 2 the
// program refused its input, 1 anything else that stopped the run.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "htrun/cluster.h"
#include "htrun/supervisor.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  htrun::SupervisorOptions o;
  int nodes = 2, slots = 0;
  std::string hostfile, mpirun = "mpirun";
  bool local = false, dry_run = false;
  CLI::App app{"htrun: launch a training job and keep it alive through failures"};
  app.add_option("--nodes", nodes, "simulated nodes on this machine that run the job (spares come on top)")->check(CLI::PositiveNumber);
  app.add_option("--slots", slots, "ranks per node (default: the hostfile's slots, Slurm's tasks per node, or 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--hostfile", hostfile, "an Open MPI hostfile of the machines to run on (spares last)");
  app.add_flag("--local", local, "simulated local nodes even inside a Slurm allocation");
  app.add_option("--spares", o.spares,
                 "nodes held back to replace cordoned ones: extra simulated nodes, or the last hosts of the hostfile "
                 "or the Slurm allocation")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--run-dir", o.run_dir, "run directory passed to the program (heartbeats, checkpoints, report)");
  app.add_option("--max-restarts", o.max_restarts, "relaunches before giving up");
  app.add_option("--backoff", o.backoff_s, "seconds from a failure's detection to the relaunch, health checks included, when the launch made no progress (doubling while launches keep failing so, at most 30); a launch that trained past its checkpoint is relaunched at once");
  app.add_option("--hang-timeout", o.hang_timeout_s,
                 "seconds without progress in a rank's heartbeat that mean a hang; the ranks' communication timeout "
                 "(HT_COMM_TIMEOUT, unless set) is two thirds of it, so a peer cut off is named before it is a hang");
  app.add_option("--start-timeout", o.start_timeout_s,
                 "seconds from launch until every rank has started (heartbeat past start-up; 0: no limit)");
  app.add_option("--grace", o.grace_s, "seconds between TERM and KILL when stopping the job");
  app.add_option("--health-timeout", o.health_timeout_s, "seconds a node's health check may take");
  app.add_option("--connect-timeout", o.connect_timeout_s,
                 "seconds a health check may take to reach a host (ssh's ConnectTimeout; hostfile nodes)")
      ->check(CLI::PositiveNumber);
  app.add_option("--readmit-after", o.readmit_after_s,
                 "seconds after which a cordoned node is health-checked again at the next incident, and returns as a "
                 "spare when it passes (the ranks left on it by earlier launches ended first); default: never. Not "
                 "under Slurm, where a drained node returns when an administrator resumes it");
  app.add_option("--probe-port", o.probe_port,
                 "the port htrun connects to on a host whose node agent's connection closed, to tell a host down from "
                 "an agent gone (default: ssh's 22 for a hostfile, slurmd's 6818 under Slurm; 0: no probe)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--unreachable-after", o.unreachable_after_s,
                 "seconds a node agent that spoke before may stay silent, while the others speak, before htrun "
                 "takes its host for cut off and relaunches without it")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--health-arg", o.health_args,
                 "an argument for ht-health, e.g. a threshold (repeatable; --health-arg=--min-memory-gbps=1)")
      ->allow_extra_args(false);
  app.add_flag("--allow-shrink", o.allow_shrink, "with no spare left, continue on fewer nodes");
  app.add_flag("!--no-health", o.health, "skip ht-health before relaunching");
  app.add_option("--mpirun", mpirun, "the MPI launcher for local and hostfile nodes");
  app.add_option("--launcher-arg", o.launcher_args, "an argument for mpirun/srun (repeatable)")->allow_extra_args(false);
  app.add_option("--health-tool", o.health_tool, "ht-health (default: next to htrun)");
  app.add_option("--agent-tool", o.agent_tool, "ht-agent, the node agent htrun starts on every host (default: next to htrun)");
  app.add_option("--agent-dir", o.agent_dir,
                 "the directory of the ranks' socket to their node agent on every host (default: a new /tmp/htrun-<uid>-<id>)");
  app.add_option("--controller-address", o.controller_address,
                 "the address the node agents reach htrun at (default: this host's name; 127.0.0.1 for simulated nodes)");
  app.add_option("--controller-port", o.controller_port, "the port htrun listens on for its node agents (default: any free one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--summary-interval", o.summary_interval_ms,
                 "milliseconds between two summaries of a node agent (default: 500, longer beyond 4,096 hosts so that "
                 "htrun takes at most 8,192 a second, at most a third of --unreachable-after)")
      ->check(CLI::Range(20, 60000));
  app.add_option("--agent-timeout", o.agent_timeout_s, "seconds a node agent has to connect after it was started")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--dry-run", dry_run, "print the node set and the commands, launch nothing");
  app.add_option("program", o.program, "-- program [args]")->required();
  app.allow_extras(false);
  CLI11_PARSE(app, argc, argv);
  // The two flags htrun appends: given to the program as well, the launch
  // would fail on a repeated flag.
  for (const std::string& arg : o.program)
    if (arg == "--run-dir" || arg.rfind("--run-dir=", 0) == 0 || arg == "--resume" || arg.rfind("--resume=", 0) == 0) {
      std::fprintf(stderr,
                   "htrun: the program's arguments hold %s, a flag htrun passes itself (--run-dir <htrun's --run-dir> "
                   "--resume auto): give the run directory to htrun (--run-dir) and drop it from the program's\n",
                   arg.c_str());
      return 2;
    }
  const fs::path here = fs::canonical("/proc/self/exe").parent_path();
  if (o.health_tool.empty()) o.health_tool = (here / "ht-health").string();
  if (o.agent_tool.empty()) o.agent_tool = (here / "ht-agent").string();
  try {
    int source_slots = 0;
    htrun::Cluster cluster = !hostfile.empty()                           ? htrun::Cluster::from_hostfile(hostfile, &source_slots)
                             : (std::getenv("SLURM_JOB_ID") && !local) ? htrun::Cluster::from_slurm(&source_slots)
                                                                         : htrun::Cluster::local(nodes + o.spares);
    cluster.set_mpirun(mpirun);
    if (o.readmit_after_s >= 0 && cluster.kind() == htrun::ClusterKind::kSlurm) {
      std::fprintf(stderr,
                   "htrun: --readmit-after is not for a Slurm allocation: htrun drains a bad node, and it returns when "
                   "an administrator resumes it (scontrol update nodename=... state=resume)\n");
      return 2;
    }
    o.slots = slots > 0 ? slots : source_slots > 0 ? source_slots : 1;
    htrun::Supervisor supervisor(o, std::move(cluster));
    if (dry_run) {
      std::fputs(supervisor.plan().c_str(), stdout);
      return 0;
    }
    const htrun::Report report = supervisor.run();
    std::fputs(htrun::report_text(report).c_str(), stderr);
    return report.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
