// Learning-rate schedules with linear warm-up.
#include "ht/optim/lr_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ht/core/error.h"

namespace ht::optim {

std::string decay_name(Decay d) {
  switch (d) {
    case Decay::kCosine: return "cosine";
    case Decay::kLinear: return "linear";
    case Decay::kConstant: return "constant";
  }
  return "?";
}

Decay parse_decay(std::string_view name) {
  for (Decay d : {Decay::kCosine, Decay::kLinear, Decay::kConstant})
    if (name == decay_name(d)) return d;
  throw Error(ErrorKind::kConfig,
              fmt::format("--lr-decay '{}' is not known: choose cosine, linear or constant", name));
}

float LrSchedule::lr(std::int64_t step) const {
  if (step < warmup_steps) return max_lr * float(step + 1) / float(warmup_steps);
  if (step >= total_steps) return min_lr;
  const double progress = double(step - warmup_steps) / double(std::max<std::int64_t>(total_steps - warmup_steps, 1));
  double left = 1.0;  // the share of max_lr - min_lr still to go
  if (decay == Decay::kCosine) left = 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  if (decay == Decay::kLinear) left = 1.0 - progress;
  return float(min_lr + (max_lr - min_lr) * left);
}

}  // namespace ht::optim
