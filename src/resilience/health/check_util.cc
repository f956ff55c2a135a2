// Helpers shared by the node health checks: timing a check, thresholds,
// deterministic inputs and the GEMM verification (see check_util.h).
#include "resilience/health/check_util.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <exception>

#include "ht/core/error.h"
#include "ht/resilience/faults.h"

namespace ht::resilience::detail {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double seconds_since(Clock::time_point t0) { return ms_since(t0) / 1e3; }

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

bool node_marked_unhealthy(const std::string& spec, int node) {
  return !spec.empty() && FaultPlan::parse(spec).node_unhealthy(node);
}

std::vector<float> pseudo_random(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (float& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = float(std::int64_t(s >> 40) - (1 << 23)) / float(1 << 23);
  }
  return v;
}

// The bound: an f32 dot product of length k is within about
// k * 2^-24 * sum |a_iq b_qj| of the exact value; `slack` widens that for two
// computed operands (GPU vs CPU).
std::string check_gemm(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
                       std::int64_t m, std::int64_t n, std::int64_t k, double slack, const std::string& what) {
  const double u = std::ldexp(1.0, -24);
  std::int64_t wrong = 0, worst_i = 0, worst_j = 0;
  double worst_ratio = 0, worst_ref = 0, worst_got = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0, s_abs = 0;
      for (std::int64_t q = 0; q < k; ++q) {
        const double p = double(a[std::size_t(i * k + q)]) * double(b[std::size_t(q * n + j)]);
        s += p;
        s_abs += std::abs(p);
      }
      const double got = c[std::size_t(i * n + j)];
      const double bound = slack * double(k + 4) * u * s_abs + 1e-30;
      const double ratio = std::isfinite(got) ? std::abs(got - s) / bound : INFINITY;
      if (ratio > 1) ++wrong;
      if (ratio > worst_ratio) worst_ratio = ratio, worst_i = i, worst_j = j, worst_ref = s, worst_got = got;
    }
  if (wrong == 0) return {};
  return fmt::format("{} {}x{}x{} wrong: {} of {} elements outside the f32 error bound, worst c[{},{}] = {} vs {}", what,
                     m, k, n, wrong, m * n, worst_i, worst_j, worst_got, worst_ref);
}

CheckResult run_check(const std::string& name, const std::function<void(CheckResult&)>& body) {
  CheckResult r;
  r.name = name;
  const auto t0 = Clock::now();
  try {
    body(r);
  } catch (const Error& e) {
    r.ok = false;
    r.reason = "error: " + e.message();
  } catch (const std::exception& e) {
    r.ok = false;
    r.reason = std::string("error: ") + e.what();
  }
  r.ms = ms_since(t0);
  return r;
}

void require_min(CheckResult& r, const std::string& what) {
  if (r.threshold > 0 && !(r.value >= r.threshold)) {
    r.ok = false;
    r.reason = fmt::format("{} {:.3g} {} is below the minimum {:.3g} {}", what, r.value, r.unit, r.threshold, r.unit);
  }
}

CheckResult skipped(const std::string& name, const std::string& why, const std::string& unit) {
  CheckResult r;
  r.name = name;
  r.skipped = true;
  r.reason = why;
  r.unit = unit;
  return r;
}

}  // namespace ht::resilience::detail
