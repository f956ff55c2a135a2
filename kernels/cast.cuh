// Loads and stores of f32/f16/bf16 elements as float, and the unscale-with-
// finite-check step: one body for the CPU and CUDA drivers.
#pragma once

#include <cmath>

#include "ht/core/half.h"
#include "ht/core/macros.h"

namespace ht::kern {

HT_HD float load(const float* p, long long i) { return p[i]; }
HT_HD float load(const f16* p, long long i) { return to_float(p[i]); }
HT_HD float load(const bf16* p, long long i) { return to_float(p[i]); }

HT_HD void store(float* p, long long i, float v) { p[i] = v; }
HT_HD void store(f16* p, long long i, float v) { p[i] = to_f16(v); }
HT_HD void store(bf16* p, long long i, float v) { p[i] = to_bf16(v); }

HT_HD bool is_finite(float v) { return (float_bits(v) & 0x7f800000u) != 0x7f800000u; }

/// Scales one element in place; returns false if the stored result is not
/// finite. The check reads back what was stored: a product finite in float
/// can still overflow f16 (>= 65520) and become Inf there.
template <typename T>
HT_HD bool scale_check(T* p, long long i, float scale) {
  store(p, i, load(p, i) * scale);
  return is_finite(load(p, i));
}

}  // namespace ht::kern
