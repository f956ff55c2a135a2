// Private: the CUDA side of ht::ops::raise_index_errors
// (kernels/index_errors_driver.cc; only in builds with CUDA).
#pragma once

#include "ht/core/device.h"

namespace ht::ops::detail {

void raise_cuda_index_errors(Device device);

}  // namespace ht::ops::detail
