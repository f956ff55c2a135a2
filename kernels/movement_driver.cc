// CUDA drivers of the slices and transposes: tensors to pointers (offsets in
// elements), on the current stream of the tensors' device.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void copy_rows(const Tensor& src, std::int64_t src_at, std::int64_t src_pitch, Tensor& dst, std::int64_t dst_at,
               std::int64_t dst_pitch, std::int64_t rows, std::int64_t width) {
  const ht::cuda::DeviceGuard guard(dst.device());
  const std::int64_t e = std::int64_t(dtype_size(src.dtype()));
  HT_CUDA_CHECK(ht::cuda::launch_copy_rows(static_cast<const char*>(src.data_ptr()) + src_at * e, src_pitch,
                                           static_cast<char*>(dst.data_ptr()) + dst_at * e, dst_pitch, rows, width,
                                           int(e), ht::cuda::current_stream()));
}

void transpose(const Tensor& x, const std::int64_t* dims, Tensor& out) {
  const ht::cuda::DeviceGuard guard(out.device());
  HT_CUDA_CHECK(ht::cuda::launch_transpose(x.data_ptr(), out.data_ptr(), dims, int(dtype_size(x.dtype())),
                                           ht::cuda::current_stream()));
}

}  // namespace ht::ops::cuda
