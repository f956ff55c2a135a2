// Private: a failure's cost (ht/plan/reliability.h) as JSON, as both the
// reliability plan and a run's projection write it.
#pragma once

#include <nlohmann/json.hpp>

#include "ht/plan/reliability.h"

namespace ht::plan::detail {

inline nlohmann::json failure_cost_json(const FailureCost& c) {
  return {{"detect_s", c.detect_s},     {"backoff_s", c.backoff_s},         {"relaunch_s", c.relaunch_s},
          {"restore_s", c.restore_s},   {"lost_work_s", c.lost_work_s},     {"total_s", c.total_s()}};
}

}  // namespace ht::plan::detail
