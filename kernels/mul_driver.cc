// CUDA drivers of the element-wise product and its broadcast gradient's
// column sums: tensors to pointers and the double scratch, on the current
// stream of the tensors' device.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  const ht::cuda::DeviceGuard guard(out.device());
  const std::int64_t n = a.numel(), c = b.numel();
  // Same shape: one row of n (b's element count is a's).
  const std::int64_t rows = c == n ? 1 : n / c, cols = c == n ? n : c;
  HT_CUDA_CHECK(ht::cuda::launch_mul(a.data<float>(), b.data<float>(), out.data<float>(), rows, cols,
                                     ht::cuda::current_stream()));
}

void mul_column_sums(const Tensor& dy, const Tensor& a, Tensor& db) {
  const ht::cuda::DeviceGuard guard(db.device());
  const std::int64_t c = db.numel(), rows = c ? a.numel() / c : 0;
  // Doubles in an f32 tensor of twice the count, as mse_forward's scratch
  // (the device allocator aligns every block for any type).
  const std::int64_t partials = ht::cuda::mul_column_sums_scratch_count(rows, c);
  Tensor scratch = Tensor::empty({2 * partials}, DType::kF32, db.device(), MemCategory::kOther);
  HT_CUDA_CHECK(ht::cuda::launch_mul_column_sums(dy.data<float>(), a.data<float>(), db.data<float>(), rows, c,
                                                 static_cast<double*>(scratch.data_ptr()),
                                                 ht::cuda::current_stream()));
  // `scratch` is freed here, in stream order after the kernels (ht/core/allocator.h).
}

}  // namespace ht::ops::cuda
