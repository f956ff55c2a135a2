// CUDA index_select driver: checks the indices on the device against the
// gathered dimension (one wait, kernels/index_check.h), throws as the CPU
// driver does, then launches the gather or the scatter-add.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "index_check.h"
#include "launch.h"
#include "ops/axis.h"
#include "ops/backend_ops.h"
#include "ops/check.h"

namespace ht::ops::cuda {

void index_select(const Tensor& x, int dim, const Tensor& index, Tensor& out) {
  const detail::AxisSplit s = detail::split_axis(x.shape(), dim);
  const ht::cuda::DeviceGuard guard(x.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  if (const auto bad = ht::cuda::first_out_of_range(index, s.size, stream))
    detail::throw_bad_index("index_select", bad->value, bad->position, s.size, dim, "x", x.shape());
  HT_CUDA_CHECK(ht::cuda::launch_index_select(x.data<float>(), index.data<std::int32_t>(), out.data<float>(), s.outer,
                                              s.size, index.numel(), s.inner, stream));
}

void index_select_backward(const Tensor& dout, int dim, const Tensor& index, Tensor& dx) {
  const detail::AxisSplit s = detail::split_axis(dx.shape(), dim);
  const ht::cuda::DeviceGuard guard(dx.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  if (const auto bad = ht::cuda::first_out_of_range(index, s.size, stream))
    detail::throw_bad_index("index_select_backward", bad->value, bad->position, s.size, dim, "dx", dx.shape());
  HT_CUDA_CHECK(ht::cuda::launch_index_select_backward(dout.data<float>(), index.data<std::int32_t>(),
                                                       dx.data<float>(), s.outer, s.size, index.numel(), s.inner,
                                                       stream));
}

}  // namespace ht::ops::cuda
