// CUDA cross-entropy driver: checks the targets on the device against the
// full vocabulary (one wait for the check), throws as the CPU driver does,
// then launches the op.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "index_check.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {
namespace {

void check_targets(const Tensor& targets, std::int64_t vocab, cudaStream_t stream) {
  if (const auto bad = ht::cuda::first_out_of_range(targets, vocab, stream))
    throw Error(ErrorKind::kOutOfRange, fmt::format("cross_entropy: target {} at row {} is outside the vocabulary [0, {})",
                                                    bad->value, bad->position, vocab));
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(logits.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  check_targets(targets, v, stream);
  HT_CUDA_CHECK(ht::cuda::launch_cross_entropy_forward(logits.data<float>(), targets.data<std::int32_t>(),
                                                       losses.data<float>(), lse.data<float>(), n, v, stream));
}

void cross_entropy_shard_forward(const Tensor& logits, const Tensor& targets, VocabShard shard, Tensor& lse,
                                 Tensor& target_logit) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(logits.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  check_targets(targets, shard.size, stream);
  HT_CUDA_CHECK(ht::cuda::launch_cross_entropy_shard_forward(logits.data<float>(), targets.data<std::int32_t>(),
                                                             lse.data<float>(), target_logit.data<float>(), n, v,
                                                             shard.real_rows(v), shard.start, stream));
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits, VocabShard shard) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(logits.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  check_targets(targets, shard.size, stream);
  HT_CUDA_CHECK(ht::cuda::launch_cross_entropy_backward(logits.data<float>(), targets.data<std::int32_t>(),
                                                        lse.data<float>(), dloss, dlogits.data<float>(), n, v,
                                                        shard.real_rows(v), shard.start, stream));
}

}  // namespace ht::ops::cuda
