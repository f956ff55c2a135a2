// Masked mean pooling pieces shared by the CPU and CUDA drivers: which mask
// values keep a position, what a row's sum (in double, over t in increasing
// order on both drivers) becomes, and the gradient each kept position gets.
#pragma once

#include <cstdint>

#include "ht/core/macros.h"

namespace ht::kern {

/// Whether mask value m keeps its position: any nonzero value.
HT_HD bool masked_mean_keeps(std::int32_t m) { return m != 0; }

/// out[b, c] from the sum of the `count` kept values of x[b, :, c]; a row
/// with none gives 0.
HT_HD float masked_mean_finish(double sum, long long count) {
  return count > 0 ? float(sum / double(count)) : 0.f;
}

/// dx[b, t, c] from dout[b, c]: dout / count at a kept position (count >= 1
/// there), 0 elsewhere. A division, as reduce_grad's mean.
HT_HD float masked_mean_grad(float dout, long long count, bool keep) { return keep ? dout / float(count) : 0.f; }

}  // namespace ht::kern
