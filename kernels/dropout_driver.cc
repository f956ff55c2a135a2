// CUDA driver of dropout: x as (rows, len) pointers and the key's words, on
// the current stream of the tensors' device.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void dropout(const Tensor& x, float p, const DropoutKey& key, Tensor& out) {
  const ht::cuda::DeviceGuard guard(out.device());
  const std::int64_t rows = x.size(0), len = rows ? x.numel() / rows : 0;
  HT_CUDA_CHECK(ht::cuda::launch_dropout(x.data<float>(), out.data<float>(), rows, len, key.seed, key.site,
                                         key.first_row, p, ht::cuda::current_stream()));
}

}  // namespace ht::ops::cuda
