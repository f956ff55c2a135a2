// Learning-rate schedules: linear warm-up, then a decay to min_lr at
// total_steps — cosine (the default), linear, or none (constant) — and
// min_lr after. A program wanting another schedule gives the engine its
// own function of the step (train::EngineOptions::lr_schedule).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ht::optim {

enum class Decay { kCosine, kLinear, kConstant };

/// "cosine", "linear", "constant".
std::string decay_name(Decay d);
/// Throws kConfig naming the choices for another name.
Decay parse_decay(std::string_view name);

struct LrSchedule {
  float max_lr = 6e-4f;
  float min_lr = 6e-5f;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  Decay decay = Decay::kCosine;

  /// Learning rate for 0-based `step`: max_lr * (step+1)/warmup during
  /// warm-up, then from max_lr to min_lr at total_steps along the decay
  /// (constant: max_lr until the end), min_lr from total_steps on.
  float lr(std::int64_t step) const;
};

}  // namespace ht::optim
