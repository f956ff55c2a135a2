// The memory health check: host memory written and read back with several
// patterns, and the rate of doing so.
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <new>

#include "resilience/health/check_util.h"
#include "resilience/health/checks.h"

namespace ht::resilience::detail {

// memory: allocate, then for each pattern write every word and read it back.
CheckResult check_memory(const HealthOptions& o) {
  return run_check("memory", [&](CheckResult& r) {
    r.unit = "GB/s";
    r.threshold = o.min_memory_gbps;
    const std::size_t words = std::size_t(o.memory_mib) * (std::size_t(1) << 20) / sizeof(std::uint64_t);
    std::unique_ptr<std::uint64_t[]> buf(new (std::nothrow) std::uint64_t[words]);
    if (!buf) {
      r.ok = false;
      r.reason = fmt::format("could not allocate {} MiB of host memory", o.memory_mib);
      return;
    }
    // Constant patterns catch stuck bits; the address-derived one catches
    // words that alias each other (a broken address line).
    const std::uint64_t patterns[] = {0x5555555555555555ULL, 0xAAAAAAAAAAAAAAAAULL, 0, ~0ULL};
    const auto t0 = Clock::now();
    std::size_t bad = 0, first_bad = 0;
    for (int p = 0; p < 5; ++p) {
      auto expect = [&](std::size_t i) { return p < 4 ? patterns[p] : (i + 1) * 0x9E3779B97F4A7C15ULL; };
      std::uint64_t* w = buf.get();
      for (std::size_t i = 0; i < words; ++i) w[i] = expect(i);
      asm volatile("" ::: "memory");  // the reads below must go to memory
      for (std::size_t i = 0; i < words; ++i)
        if (w[i] != expect(i) && bad++ == 0) first_bad = i;
    }
    const double s = seconds_since(t0);
    r.value = 5.0 * 2.0 * double(words * sizeof(std::uint64_t)) / s / 1e9;
    if (bad > 0) {
      r.ok = false;
      r.reason = fmt::format("{} of {} words read back wrong in {} MiB (first at byte {})", bad, 5 * words,
                             o.memory_mib, first_bad * sizeof(std::uint64_t));
      return;
    }
    r.reason = fmt::format("{} MiB written and verified with 5 patterns", o.memory_mib);
    require_min(r, "write+verify bandwidth");
  });
}

}  // namespace ht::resilience::detail
