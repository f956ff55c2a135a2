// Private: the node health checks that run_health_checks (resilience/health.cc)
// chooses from, one file each under resilience/health/. Each returns its
// results; a failure of the node is a result, never an exception.
#pragma once

#include <vector>

#include "ht/resilience/health.h"

namespace ht::resilience::detail {

/// compute (compute.cc): a small awkward-sized host sgemm checked against a
/// double-precision loop, then the rate of a gemm_size^3 one. Fails with
/// "fault injected: node-unhealthy" when options.faults marks options.node.
CheckResult check_compute(const HealthOptions& options);

/// memory (memory.cc): memory_mib of host memory written and verified with
/// five patterns, and the rate of doing so.
CheckResult check_memory(const HealthOptions& options);

/// disk (disk.cc): options.ckpt_dir (not empty) exists or can be created,
/// takes a new file, and has the free space. Sets `usable` to whether the
/// directory can take files, the condition for check_disk_write.
CheckResult check_disk(const HealthOptions& options, bool& usable);

/// disk_write (disk.cc): the rate of writing disk_write_mib into a probe file
/// in options.ckpt_dir with fsync; the file is read back and removed.
CheckResult check_disk_write(const HealthOptions& options);

/// collectives (collectives.cc): an exact all_reduce over `comm` (size > 1),
/// then its bus bandwidth. Collective over `comm`.
CheckResult check_collectives(const HealthOptions& options, comm::Communicator& comm);

/// gpu_devices, gpu_ecc, gpu_gemm (gpus.cc), appended to `out` in that order.
void check_gpus(const HealthOptions& options, std::vector<CheckResult>& out);

}  // namespace ht::resilience::detail
