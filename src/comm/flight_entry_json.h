// Private: one FlightEntry as JSON, the single spelling used both by the
// recorder's dumps and by the merge tool's JSON report, and the one way a
// name enters an entry's fixed fields.
#pragma once

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "ht/comm/flight_recorder.h"

namespace ht::comm::detail {

// Copies `s` into a fixed char field, always NUL-terminated, cut at a
// character boundary: a name cut inside a UTF-8 sequence would make the JSON
// of a dump or a report (nlohmann's dump) throw.
template <std::size_t N>
void copy_field(char (&dst)[N], const std::string& s) {
  std::size_t n = std::min(s.size(), N - 1);
  if (n < s.size())
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

inline nlohmann::ordered_json flight_entry_json(const FlightEntry& e) {
  return {{"seq", e.seq},
          {"op", e.op},
          {"group", e.group},
          {"count", e.count},
          {"dtype", std::string(dtype_name(e.dtype))},
          {"peer", e.peer},
          {"state", op_state_name(e.state)},
          {"enqueue_us", e.enqueue_us},
          {"start_us", e.start_us},
          {"end_us", e.end_us}};
}

}  // namespace ht::comm::detail
