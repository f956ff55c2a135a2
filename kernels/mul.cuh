// Element-wise product pieces shared by the CPU and CUDA drivers of ops::mul
// and ops::mul_backward: the product itself, and one term of the broadcast
// operand's gradient (a column sum of dy * a, in double).
#pragma once

#include "ht/core/macros.h"

namespace ht::kern {

/// Rows of dy * a that each partial column sum of mul_backward's broadcast
/// gradient covers. Both drivers sum rows [k * kMulRowChunk, (k + 1) *
/// kMulRowChunk) of a column in order, then the chunk sums in chunk order, so
/// they give the same bits, whatever the thread count or grid.
inline constexpr long long kMulRowChunk = 64;

/// out = a * b in f32: one rounding, the same bits on every driver.
HT_HD float mul(float a, float b) { return a * b; }

/// One term of a column sum of dy * a: the product in double, which is exact
/// for two floats (24 + 24 significant bits fit in 53). A fused multiply-add
/// of it into a double accumulator therefore rounds exactly as the separate
/// add does, and nvcc's contraction cannot change the bits.
HT_HD double mul_term(float dy, float a) { return double(dy) * double(a); }

}  // namespace ht::kern
