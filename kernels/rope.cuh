// RoPE's per-pair rotation, shared by the CPU and CUDA drivers.
#pragma once

#include "ht/core/macros.h"

namespace ht::kern {

/// Rotates the pair (x1, x2) = (x[i], x[i + D/2]) by the angle whose cosine
/// and sine are c and s ("rotate half"): y1 = x1 c - x2 s, y2 = x2 c + x1 s.
/// The inverse rotation (backward) passes -s.
HT_HD void rope_rotate(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = x1 * c - x2 * s;
  y2 = x2 * c + x1 * s;
}

}  // namespace ht::kern
