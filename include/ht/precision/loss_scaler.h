// ht::precision::LossScaler: dynamic loss scaling for f16 training.
//
// The loss is multiplied by scale() before backward so small gradients stay
// representable in f16; gradients are divided by it before clipping and the
// optimizer. A step whose gradients hold an Inf or NaN anywhere in the world
// is skipped. The state machine (as Megatron's DynamicGradScaler):
//   overflow:  the run of good steps restarts; the hysteresis budget drops by
//              one, and once it is spent this and every further overflow
//              multiplies the scale by backoff_factor (never below min_scale).
//   finite:    after growth_interval consecutive finite steps the scale is
//              multiplied by growth_factor (never above max_scale) and the
//              hysteresis budget is refilled.
// Every rank feeds it the same world-reduced verdict, so every rank holds the
// same scale. Its state is part of the training state a checkpoint saves.
#pragma once

#include <cstdint>

namespace ht::precision {

struct LossScalerOptions {
  float initial_scale = 65536.f;  // 2^16
  float growth_factor = 2.f;
  float backoff_factor = 0.5f;
  std::int64_t growth_interval = 2000;
  int hysteresis = 2;  // overflows tolerated before the scale backs off
  float min_scale = 1.f;
  float max_scale = 16777216.f;  // 2^24

  /// Throws kConfig naming the bad value.
  void validate() const;
};

struct LossScalerState {
  float scale = 65536.f;
  std::int64_t good_steps = 0;   // consecutive finite steps since the last growth or overflow
  int hysteresis_left = 2;
  std::int64_t skipped_steps = 0;  // overflowing steps so far
  friend bool operator==(const LossScalerState&, const LossScalerState&) = default;
};

class LossScaler {
 public:
  /// enabled false: a constant scale of 1 that never skips (f32, bf16).
  explicit LossScaler(bool enabled = false, const LossScalerOptions& options = {});

  bool enabled() const { return enabled_; }
  float scale() const { return state_.scale; }
  /// Records a step's world-wide verdict; returns true when the step must be
  /// skipped (found_nonfinite while enabled).
  bool update(bool found_nonfinite);

  const LossScalerState& state() const { return state_; }
  void set_state(const LossScalerState& s) { state_ = s; }
  const LossScalerOptions& options() const { return options_; }

 private:
  bool enabled_;
  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace ht::precision
