// ht::precision::LossScaler.
#include "ht/precision/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "ht/core/error.h"

namespace ht::precision {

void LossScalerOptions::validate() const {
  HT_CHECK(std::isfinite(initial_scale) && initial_scale > 0.f, ErrorKind::kConfig,
           "--loss-scale {} must be a positive finite number", initial_scale);
  HT_CHECK(growth_factor >= 1.f, ErrorKind::kConfig, "the loss-scale growth factor {} must be >= 1", growth_factor);
  HT_CHECK(backoff_factor > 0.f && backoff_factor < 1.f, ErrorKind::kConfig,
           "the loss-scale backoff factor {} must lie in (0, 1)", backoff_factor);
  HT_CHECK(growth_interval > 0, ErrorKind::kConfig, "--loss-scale-window {} must be positive", growth_interval);
  HT_CHECK(hysteresis > 0, ErrorKind::kConfig, "--loss-scale-hysteresis {} must be positive", hysteresis);
  HT_CHECK(min_scale > 0.f && min_scale <= initial_scale && initial_scale <= max_scale, ErrorKind::kConfig,
           "loss scales must satisfy 0 < min ({}) <= initial ({}) <= max ({})", min_scale, initial_scale, max_scale);
}

LossScaler::LossScaler(bool enabled, const LossScalerOptions& options) : enabled_(enabled), options_(options) {
  if (enabled_) options_.validate();
  state_.scale = enabled_ ? options_.initial_scale : 1.f;
  state_.hysteresis_left = options_.hysteresis;
}

bool LossScaler::update(bool found_nonfinite) {
  if (!enabled_) return false;
  if (found_nonfinite) {
    ++state_.skipped_steps;
    state_.good_steps = 0;
    state_.hysteresis_left = std::max(0, state_.hysteresis_left - 1);
    if (state_.hysteresis_left == 0) state_.scale = std::max(options_.min_scale, state_.scale * options_.backoff_factor);
    return true;
  }
  if (++state_.good_steps >= options_.growth_interval) {
    state_.good_steps = 0;
    state_.hysteresis_left = options_.hysteresis;
    state_.scale = std::min(options_.max_scale, state_.scale * options_.growth_factor);
  }
  return false;
}

}  // namespace ht::precision
