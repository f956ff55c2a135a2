// ht::ops::raise_index_errors: nothing to read on the CPU.
#include "ht/ops/index_errors.h"

#include "ht/config.h"
#include "ops/index_errors_backend.h"

namespace ht::ops {

void raise_index_errors(Device device) {
  if (!device.is_cuda()) return;
#if HT_HAVE_CUDA
  detail::raise_cuda_index_errors(device);
#endif
}

}  // namespace ht::ops
