// Private: the one monotonic clock the library times its own work with.
#pragma once

#include <chrono>

namespace ht {

// Milliseconds on the steady clock: for intervals only (stalls, write times),
// never for wall-clock dates.
inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ht
