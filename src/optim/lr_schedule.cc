// Cosine learning-rate schedule with linear warm-up.
#include "ht/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ht::optim {

float CosineSchedule::lr(std::int64_t step) const {
  if (step < warmup_steps) return max_lr * float(step + 1) / float(warmup_steps);
  if (step >= total_steps) return min_lr;
  const double progress = double(step - warmup_steps) / double(std::max<std::int64_t>(total_steps - warmup_steps, 1));
  const double cosine = 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  return float(min_lr + (max_lr - min_lr) * cosine);
}

}  // namespace ht::optim
