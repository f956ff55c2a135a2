// ht::resilience health checks: is this node fit to train? Compute, memory,
// the checkpoint directory, collectives and GPUs, each measured against a
// threshold. The supervisor (htrun) runs them through `ht-health` before a
// launch and after a failure, once per node, and reads the JSON.
//
// Every check yields one CheckResult; a check that cannot apply here (no GPU,
// no communicator, no checkpoint directory given) is reported as skipped and
// passes: a CPU node never fails for lacking a GPU unless the options say how
// many GPUs to expect. Thresholds are minimums: a measured value passes when
// value >= threshold (threshold 0: no minimum, only correctness counts).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ht::comm {
class Communicator;
}

namespace ht::resilience {

/// Which checks run. Names (for parse_health_checks and the JSON):
/// compute, memory, disk (disk and disk_write), collectives, gpu (gpu_devices,
/// gpu_ecc, gpu_gemm).
struct HealthChecks {
  bool compute = true;
  bool memory = true;
  bool disk = true;
  bool collectives = true;
  bool gpu = true;
};

/// "compute,disk" -> only those; "all" -> every check. Throws
/// ht::Error(kInvalidArgument) naming an unknown name and the valid ones.
HealthChecks parse_health_checks(std::string_view names);

struct HealthOptions {
  /// The node label the supervisor asks about (htrun's node index); -1: none.
  /// Used for fault injection and echoed in the report.
  int node = -1;
  /// The checkpoint directory to test (created if missing, as a run would);
  /// empty: the disk checks are skipped.
  std::string ckpt_dir;

  /// compute: a host sgemm of gemm_size^3 through ht::ops::matmul. The
  /// default minimum passes on a loaded 2-core machine (7-30 GFLOP/s measured there).
  double min_gemm_gflops = 2.0;
  std::int64_t gemm_size = 384;
  /// memory: bytes allocated, written and verified with several patterns.
  std::int64_t memory_mib = 64;
  double min_memory_gbps = 0.2;  // a loaded 2-core machine measured 0.5 once; a sound node does 5-20
  /// disk: free space in ckpt_dir, and the rate of writing disk_write_mib
  /// into a probe file with fsync (then removed).
  double min_free_disk_gib = 1.0;
  double min_disk_write_mbps = 20.0;
  std::int64_t disk_write_mib = 8;
  /// collectives (only with a communicator of size > 1): all_reduce of known
  /// values, then the bus bandwidth (nccl-tests' 2(n-1)/n factor) of an
  /// all_reduce of allreduce_mib.
  double min_allreduce_busbw_gbps = 0.1;
  std::int64_t allreduce_mib = 16;
  /// gpu (CUDA builds with visible devices): a gpu_gemm_size^3 f32 GEMM on
  /// each device; the slowest must reach the minimum.
  double min_gpu_gemm_gflops = 500.0;
  std::int64_t gpu_gemm_size = 2048;
  /// GPUs this node must show; 0: whatever is there (none is fine).
  int expect_gpus = 0;

  /// A fault plan in HT_FAULTS syntax ("node-unhealthy:node=2,..."). Only
  /// node-unhealthy entries matter here: when one names `node`, the compute
  /// check fails with "fault injected: node-unhealthy". Programs read
  /// HT_FAULTS once and pass it here; the library never reads it.
  std::string faults;

  HealthChecks checks;
};

struct CheckResult {
  std::string name;      // "compute", "memory", "disk", "disk_write", "collectives", "gpu_devices", ...
  bool ok = true;
  bool skipped = false;  // did not apply here (ok stays true) — the reason says why
  std::string reason;    // why it failed or was skipped, with values; notes when it passed
  double value = 0;      // the measurement, in `unit`
  std::string unit;      // "GFLOP/s", "GB/s", "GiB", "MB/s", "devices"
  double threshold = 0;  // the minimum value passes at (0: none)
  double ms = 0;         // how long the check took
};

struct HealthReport {
  std::string host;
  int node = -1;  // the label asked about (HealthOptions::node)
  int rank = 0;   // rank in the communicator (0 without one)
  bool ok = true; // every check ok
  std::vector<CheckResult> checks;
};

/// Runs the selected checks in order compute, memory, disk, collectives, gpu
/// and returns the report. Synchronous. `comm` may be null (no collectives
/// check); when it has more than one rank and checks.collectives is set, this
/// is collective over it: every rank must call it with the same checks and
/// sizes, or the collectives check waits until the communicator's timeout.
/// Failures of the node are results, not exceptions; throws only
/// ht::Error(kConfig) for a malformed node-unhealthy entry in `faults` and
/// kInvalidArgument for non-positive sizes.
HealthReport run_health_checks(const HealthOptions& options, comm::Communicator* comm);

/// The report as one JSON object:
///   {"host", "node", "rank", "ok", "version", "checks": [{"name", "ok",
///    "skipped", "reason", "value", "unit", "threshold", "ms"}]}
std::string to_json(const HealthReport& report);
/// Several ranks' reports: {"ok" (all ok), "world_size", "reports": [...]}.
std::string to_json(const std::vector<HealthReport>& reports);
/// Parses one report written by to_json(HealthReport). Throws
/// ht::Error(kInvalidArgument) saying what is missing or malformed.
HealthReport health_report_from_json(const std::string& json);

/// A fixed-width table for people: one header line ("# ht-health ...
/// HEALTHY" or "UNHEALTHY"), then one line per check.
std::string format_health_report(const HealthReport& report);

/// Every rank's report, in rank order, on every rank: collective over `comm`
/// (two all_gathers). Throws CommError if the communicator fails.
std::vector<HealthReport> gather_health_reports(const HealthReport& local, comm::Communicator& comm);

}  // namespace ht::resilience
