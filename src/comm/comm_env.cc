// comm_options_from_env: HT_COMM_TIMEOUT and HT_COMM_DEBUG.
#include "ht/comm/comm_env.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "ht/core/error.h"

namespace ht::comm {

CommOptions comm_options_from_env(CommOptions defaults) {
  CommOptions o = std::move(defaults);
  if (const char* v = std::getenv("HT_COMM_TIMEOUT"); v && *v) {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    HT_CHECK(end && *end == '\0' && std::isfinite(s) && s > 0, ErrorKind::kConfig,
             "HT_COMM_TIMEOUT='{}' is not a positive number of seconds (e.g. HT_COMM_TIMEOUT=300)", v);
    o.timeout = std::chrono::milliseconds(std::llround(s * 1000.0));
    if (o.timeout.count() == 0) o.timeout = std::chrono::milliseconds(1);
  }
  if (const char* v = std::getenv("HT_COMM_DEBUG"); v && *v) {
    const std::string s = v;
    HT_CHECK(s == "0" || s == "1", ErrorKind::kConfig, "HT_COMM_DEBUG='{}' must be 0 or 1", s);
    o.debug = s == "1";
  }
  return o;
}

}  // namespace ht::comm
