// Private: helpers shared by the node health checks (resilience/health/*.cc):
// timing a check and turning its exceptions into a failed result, the
// minimum-value rule, deterministic inputs and the GEMM verification.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ht/resilience/health.h"

namespace ht::resilience::detail {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0);
double seconds_since(Clock::time_point t0);

/// This machine's host name ("?" when it cannot be read).
std::string host_name();

/// Whether the fault plan `spec` (HT_FAULTS syntax, as passed in the options)
/// marks `node` unhealthy; the plan's other faults belong to the training run.
/// Throws ht::Error(kConfig) for a malformed node-unhealthy entry.
bool node_marked_unhealthy(const std::string& spec, int node);

/// n deterministic values in [-1, 1] from a 64-bit LCG seeded with `seed`.
std::vector<float> pseudo_random(std::size_t n, std::uint64_t seed);

/// Compares c (m, n) = a (m, k) @ b (k, n), all row-major, with a
/// double-precision loop, within the f32 error bound times `slack`. Returns ""
/// when every element is within, else what was wrong, naming `what`.
std::string check_gemm(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
                       std::int64_t m, std::int64_t n, std::int64_t k, double slack, const std::string& what);

/// Runs `body` for a check named `name`: times it, and turns an exception into
/// a failed result (a broken node throws; that is a finding, not a crash).
CheckResult run_check(const std::string& name, const std::function<void(CheckResult&)>& body);

/// Fails `r` unless r.value >= r.threshold (threshold 0: no minimum), with a
/// reason that starts with `what` and names both values.
void require_min(CheckResult& r, const std::string& what);

/// A check that did not apply here: skipped, ok, and `why` as its reason.
CheckResult skipped(const std::string& name, const std::string& why, const std::string& unit);

}  // namespace ht::resilience::detail
