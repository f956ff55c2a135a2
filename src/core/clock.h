// Private: the one monotonic clock the library times its own work with.
#pragma once

#include <chrono>
#include <cstdint>

namespace ht {

// Milliseconds on the steady clock: for intervals only (stalls, write times),
// never for wall-clock dates.
inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Microseconds since the Unix epoch on the system clock: comparable across
// processes (and hosts, as far as their clocks agree). The flight recorder's
// and the trace's time axis.
inline std::int64_t epoch_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ht
