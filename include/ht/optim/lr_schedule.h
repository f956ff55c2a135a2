// Learning-rate schedules: linear warm-up then cosine decay.
#pragma once

#include <cstdint>

namespace ht::optim {

struct CosineSchedule {
  float max_lr = 6e-4f;
  float min_lr = 6e-5f;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;

  /// Learning rate for 0-based `step`: max_lr * (step+1)/warmup during warm-up,
  /// then cosine from max_lr to min_lr at total_steps, min_lr after.
  float lr(std::int64_t step) const;
};

}  // namespace ht::optim
