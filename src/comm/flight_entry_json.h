// Private: one FlightEntry as JSON, the single spelling used both by the
// recorder's dumps and by the merge tool's JSON report.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ht/comm/flight_recorder.h"

namespace ht::comm::detail {

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
