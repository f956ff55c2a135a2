// Node health checks (ht::resilience::run_health_checks): parses the choice
// of checks and runs the chosen ones in order. Each check lives in
// resilience/health/<check>.cc; the report formats in health/report.cc.
#include "ht/resilience/health.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "ht/comm/communicator.h"
#include "ht/core/error.h"
#include "resilience/health/check_util.h"
#include "resilience/health/checks.h"

namespace ht::resilience {

using detail::check_collectives;
using detail::check_compute;
using detail::check_disk;
using detail::check_disk_write;
using detail::check_gpus;
using detail::check_memory;
using detail::host_name;
using detail::node_marked_unhealthy;
using detail::skipped;

HealthChecks parse_health_checks(std::string_view names) {
  if (names == "all") return {};
  HealthChecks c{false, false, false, false, false};
  std::istringstream in{std::string(names)};
  for (std::string name; std::getline(in, name, ',');) {
    if (name == "compute")
      c.compute = true;
    else if (name == "memory")
      c.memory = true;
    else if (name == "disk")
      c.disk = true;
    else if (name == "collectives")
      c.collectives = true;
    else if (name == "gpu")
      c.gpu = true;
    else
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("unknown health check '{}' in '{}': use all or a comma-separated list of compute, "
                              "memory, disk, collectives, gpu",
                              name, names));
  }
  return c;
}

HealthReport run_health_checks(const HealthOptions& o, comm::Communicator* comm) {
  HT_CHECK_ARG(o.gemm_size > 0 && o.memory_mib > 0 && o.disk_write_mib > 0 && o.allreduce_mib > 0 &&
                   o.gpu_gemm_size > 0,
               "health check sizes must be positive: gemm_size {}, memory_mib {}, disk_write_mib {}, allreduce_mib "
               "{}, gpu_gemm_size {}",
               o.gemm_size, o.memory_mib, o.disk_write_mib, o.allreduce_mib, o.gpu_gemm_size);
  node_marked_unhealthy(o.faults, o.node);  // a malformed plan is a configuration error, whatever is checked

  HealthReport report;
  report.host = host_name();
  report.node = o.node;
  report.rank = comm ? comm->rank() : 0;
  const HealthChecks& c = o.checks;
  if (c.compute) report.checks.push_back(check_compute(o));
  if (c.memory) report.checks.push_back(check_memory(o));
  if (c.disk) {
    if (o.ckpt_dir.empty()) {
      report.checks.push_back(skipped("disk", "no checkpoint directory given: skipped", "GiB"));
      report.checks.push_back(skipped("disk_write", "no checkpoint directory given: skipped", "MB/s"));
    } else {
      bool usable = false;
      report.checks.push_back(check_disk(o, usable));
      if (usable) {
        report.checks.push_back(check_disk_write(o));
      } else {
        CheckResult r;
        r.name = "disk_write";
        r.ok = false;
        r.unit = "MB/s";
        r.threshold = o.min_disk_write_mbps;
        r.reason = "not run: the checkpoint directory is unusable (see the disk check)";
        report.checks.push_back(r);
      }
    }
  }
  if (c.collectives) {
    if (comm == nullptr)
      report.checks.push_back(skipped("collectives", "no communicator: skipped", "GB/s"));
    else if (comm->size() < 2)
      report.checks.push_back(skipped("collectives", "a group of one rank: skipped", "GB/s"));
    else
      report.checks.push_back(check_collectives(o, *comm));
  }
  if (c.gpu) check_gpus(o, report.checks);
  report.ok = std::all_of(report.checks.begin(), report.checks.end(), [](const CheckResult& r) { return r.ok; });
  return report;
}

}  // namespace ht::resilience
