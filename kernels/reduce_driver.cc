// CUDA drivers of reduce and reduce_backward: the (outer, size, inner) view
// of the tensors, then one launch on the current stream.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/axis.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void reduce(const Tensor& x, int dim, Reduction r, Tensor& out) {
  const ht::cuda::DeviceGuard guard(x.device());
  const detail::AxisSplit s = detail::split_axis(x.shape(), dim);
  HT_CUDA_CHECK(ht::cuda::launch_reduce(x.data<float>(), out.data<float>(), s.outer, s.size, s.inner,
                                        r == Reduction::kMean, ht::cuda::current_stream()));
}

void reduce_backward(const Tensor& dout, int dim, Reduction r, Tensor& dx) {
  const ht::cuda::DeviceGuard guard(dx.device());
  const detail::AxisSplit s = detail::split_axis(dx.shape(), dim);
  HT_CUDA_CHECK(ht::cuda::launch_reduce_backward(dout.data<float>(), dx.data<float>(), s.outer, s.size, s.inner,
                                                 r == Reduction::kMean, ht::cuda::current_stream()));
}

}  // namespace ht::ops::cuda
