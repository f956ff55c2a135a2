// CUDA RMSNorm driver: forward, then backward as the weight gradient before
// dx (dx may alias dy, so dy must be fully read for dweight first; the two
// kernels run in that order on one stream).
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void rmsnorm_forward(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, float eps) {
  const ht::cuda::DeviceGuard guard(x.device());
  HT_CUDA_CHECK(ht::cuda::launch_rmsnorm_forward(x.data<float>(), w.data<float>(), y.data<float>(),
                                                 rstd.data<float>(), x.size(0), x.size(1), eps,
                                                 ht::cuda::current_stream()));
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw) {
  const ht::cuda::DeviceGuard guard(x.device());
  const std::int64_t n = x.size(0), c = x.size(1);
  const cudaStream_t stream = ht::cuda::current_stream();
  HT_CUDA_CHECK(ht::cuda::launch_rmsnorm_weight_grad(dy.data<float>(), x.data<float>(), rstd.data<float>(),
                                                     dw.data<float>(), n, c, stream));
  HT_CUDA_CHECK(ht::cuda::launch_rmsnorm_input_grad(dy.data<float>(), x.data<float>(), w.data<float>(),
                                                    rstd.data<float>(), dx.data<float>(), n, c, stream));
}

}  // namespace ht::ops::cuda
