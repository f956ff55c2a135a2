// ht-health: is this node fit to train? Runs ht::resilience::run_health_checks
// (compute, memory, checkpoint directory, collectives, GPUs) and prints a
// table, or JSON for the supervisor (htrun), which runs it once per node.
//
//   ht-health --node 3 --ckpt-dir /ckpt --json
//   mpirun -np 2 ht-health --mpi --json     collectives across the ranks; rank 0
//                                           prints every rank's report
//
// Environment: HT_FAULTS (node-unhealthy:node=N fails node N's compute check; with :while=FILE only while FILE exists),
// HT_COMM_TIMEOUT (with --mpi; --timeout overrides it).
// Exit status: 0 healthy, 1 unhealthy (or the checks could not be completed),
// 2 usage or configuration error.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ht/comm/comm_env.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/core/error.h"
#include "ht/resilience/health.h"

namespace {

constexpr int kHealthy = 0, kUnhealthy = 1, kUsage = 2;

int print_and_status(const std::vector<ht::resilience::HealthReport>& reports, bool json, bool merged) {
  std::string out;
  if (json) {
    out = merged ? ht::resilience::to_json(reports) : ht::resilience::to_json(reports.front());
  } else {
    for (const auto& r : reports) out += ht::resilience::format_health_report(r);
  }
  bool ok = true;
  for (const auto& r : reports) ok = ok && r.ok;
  if (merged && !json)
    out += ok ? fmt::format("# ht-health: all {} ranks healthy\n", reports.size())
              : fmt::format("# ht-health: UNHEALTHY ranks among {}\n", reports.size());
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return ok ? kHealthy : kUnhealthy;
}

// What the checks look at (the node asked about, the checkpoint directory) and their thresholds and sizes.
void add_check_options(CLI::App& app, ht::resilience::HealthOptions& o) {
  app.add_option("--node", o.node, "the node label asked about (htrun's node index; HT_FAULTS node=N matches it)");
  app.add_option("--ckpt-dir", o.ckpt_dir, "checkpoint directory to test (created if missing); none: disk skipped");
  app.add_option("--min-gemm-gflops", o.min_gemm_gflops, "minimum host sgemm rate")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--gemm-size", o.gemm_size, "host sgemm size N (N^3)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--memory-mib", o.memory_mib, "host memory written and verified")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--min-memory-gbps", o.min_memory_gbps, "minimum write+verify bandwidth")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--min-free-disk-gib", o.min_free_disk_gib, "minimum free space in --ckpt-dir")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--min-disk-write-mbps", o.min_disk_write_mbps, "minimum write rate (with fsync) in --ckpt-dir")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--disk-write-mib", o.disk_write_mib, "bytes written to measure the rate")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--min-allreduce-busbw-gbps", o.min_allreduce_busbw_gbps, "minimum all_reduce bus bandwidth (--mpi)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--allreduce-mib", o.allreduce_mib, "all_reduce size timed")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--min-gpu-gemm-gflops", o.min_gpu_gemm_gflops, "minimum f32 GEMM rate of the slowest GPU")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--expect-gpus", o.expect_gpus, "GPUs this node must show (0: any number, none included)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
}

// Under mpirun: every rank checks itself and the collectives across the
// ranks; rank 0 prints the merged report. The exit status is the world's.
int run_across_ranks(int& argc, char**& argv, const ht::resilience::HealthOptions& o, bool json,
                     std::optional<double> timeout_s) {
  ht::comm::MpiRuntime runtime(&argc, &argv);
  ht::comm::CommOptions defaults;
  defaults.timeout = std::chrono::seconds(60);
  ht::comm::CommOptions comm_options = ht::comm::comm_options_from_env(defaults);
  if (timeout_s) comm_options.timeout = std::chrono::milliseconds(std::int64_t(*timeout_s * 1e3));
  std::unique_ptr<ht::comm::Communicator> world = ht::comm::make_mpi_world(comm_options);
  const ht::resilience::HealthReport local = ht::resilience::run_health_checks(o, world.get());
  std::vector<ht::resilience::HealthReport> all;
  try {
    all = ht::resilience::gather_health_reports(local, *world);
  } catch (const ht::CommError& e) {
    // The ranks cannot be merged: each reports itself, and the job is unhealthy.
    std::fprintf(stderr, "ht-health: rank %d: cannot merge the ranks' reports: %s\n", local.rank,
                 e.message().c_str());
    print_and_status({local}, json, false);
    return kUnhealthy;
  }
  const int rc = world->rank() == 0 ? print_and_status(all, json, true)
                                    : (std::all_of(all.begin(), all.end(), [](const auto& r) { return r.ok; })
                                           ? kHealthy
                                           : kUnhealthy);
  world->finalize(comm_options.timeout);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Check that this node can train: compute, memory, checkpoint directory, collectives, GPUs",
               "ht-health"};
  ht::resilience::HealthOptions o;
  std::string checks = "all";
  bool json = false, mpi = false;
  std::optional<double> timeout_s;
  app.add_option("--checks", checks, "all, or a comma-separated list of compute,memory,disk,collectives,gpu")
      ->capture_default_str();
  add_check_options(app, o);
  app.add_flag("--json", json, "print JSON (one report; with --mpi, every rank's) instead of a table");
  app.add_flag("--mpi", mpi, "run under mpirun: collectives across the ranks, rank 0 prints the merged report");
  app.add_option("--timeout", timeout_s, "seconds any collective may take (--mpi; default HT_COMM_TIMEOUT or 60)")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kHealthy : kUsage;  // --help is not an error
  }

  const char* faults = std::getenv("HT_FAULTS");
  o.faults = faults ? faults : "";
  try {
    o.checks = ht::resilience::parse_health_checks(checks);
    if (!mpi) return print_and_status({ht::resilience::run_health_checks(o, nullptr)}, json, false);

    return run_across_ranks(argc, argv, o, json, timeout_s);
  } catch (const ht::Error& e) {
    std::fprintf(stderr, "ht-health: %s\n", e.message().c_str());
    const bool usage = e.kind() == ht::ErrorKind::kConfig || e.kind() == ht::ErrorKind::kInvalidArgument;
    return usage ? kUsage : kUnhealthy;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-health: %s\n", e.what());
  }
  return kUnhealthy;
}
