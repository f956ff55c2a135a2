// Sum/mean reduction pieces shared by the CPU and CUDA drivers: what the sum
// (accumulated in double, in each driver's fixed order) becomes, and the
// gradient each input element gets back.
#pragma once

#include "ht/core/macros.h"

namespace ht::kern {

/// The output of a reduction of `size` elements whose sum is `sum`.
HT_HD float reduce_finish(double sum, long long size, bool mean) {
  return float(mean ? sum / double(size) : sum);
}

/// The gradient of one input element from its output's gradient: dout, or
/// dout / size for a mean (a division, as PyTorch's MeanBackward).
HT_HD float reduce_grad(float dout, long long size, bool mean) { return mean ? dout / float(size) : dout; }

}  // namespace ht::kern
