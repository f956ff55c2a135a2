// CUDA cross-entropy driver: launches, then reads back the first bad target
// (one synchronisation per call) and throws as the CPU driver does.
#include "core/cuda_check.h"
#include "cuda_context.h"
#include "first_bad_index.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {
namespace {

void throw_if_bad_target(const ht::cuda::FirstBadIndex& bad, const Tensor& targets, std::int64_t vocab,
                         cudaStream_t stream) {
  const std::int64_t i = bad.read();
  if (i < 0) return;
  throw Error(ErrorKind::kOutOfRange,
              fmt::format("cross_entropy: target {} at row {} is outside the vocabulary [0, {})",
                          ht::cuda::read_device_i32(targets.data<std::int32_t>(), i, stream), i, vocab));
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(logits.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  const ht::cuda::FirstBadIndex bad(logits.device(), stream);
  HT_CUDA_CHECK(ht::cuda::launch_cross_entropy_forward(logits.data<float>(), targets.data<std::int32_t>(),
                                                       losses.data<float>(), lse.data<float>(), n, v,
                                                       bad.device_word(), stream));
  throw_if_bad_target(bad, targets, v, stream);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(logits.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  const ht::cuda::FirstBadIndex bad(logits.device(), stream);
  HT_CUDA_CHECK(ht::cuda::launch_cross_entropy_backward(logits.data<float>(), targets.data<std::int32_t>(),
                                                        lse.data<float>(), dloss, dlogits.data<float>(), n, v,
                                                        bad.device_word(), stream));
  throw_if_bad_target(bad, targets, v, stream);
}

}  // namespace ht::ops::cuda
