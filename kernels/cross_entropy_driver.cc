// CUDA cross-entropy driver: records a target outside the full vocabulary
// on the device, without a host wait (kernels/index_check.h; reported by
// ht::ops::raise_index_errors, once per training step), then launches the
// op, whose kernels read no logit for such a target.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "index_check.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {
namespace {

std::int64_t ignored_id(const CrossEntropyOptions& o) {
  return o.ignore_index ? std::int64_t(*o.ignore_index) : ht::cuda::kNoIgnore;
}

void record_bad_targets(const Tensor& targets, std::int64_t vocab, cudaStream_t stream,
                        const CrossEntropyOptions& o = {}) {
  ht::cuda::record_out_of_range(targets, vocab, /*row_length=*/1, ht::cuda::IndexOp::kCrossEntropy, stream,
                                ignored_id(o));
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse,
                           const CrossEntropyOptions& o) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(logits.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  record_bad_targets(targets, v, stream, o);
  HT_CUDA_CHECK(ht::cuda::launch_cross_entropy_forward(logits.data<float>(), targets.data<std::int32_t>(),
                                                       losses.data<float>(), lse.data<float>(), n, v, ignored_id(o),
                                                       o.label_smoothing, stream));
}

void cross_entropy_shard_forward(const Tensor& logits, const Tensor& targets, VocabShard shard, Tensor& lse,
                                 Tensor& target_logit) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(logits.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  record_bad_targets(targets, shard.size, stream);
  HT_CUDA_CHECK(ht::cuda::launch_cross_entropy_shard_forward(logits.data<float>(), targets.data<std::int32_t>(),
                                                             lse.data<float>(), target_logit.data<float>(), n, v,
                                                             shard.real_rows(v), shard.start, stream));
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits, VocabShard shard, const CrossEntropyOptions& o) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(logits.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  record_bad_targets(targets, shard.size, stream, o);
  const float eps = o.label_smoothing;
  const float uniform = eps == 0.f ? 0.f : eps / float(shard.size);  // resolved: the whole vocabulary's real ids
  HT_CUDA_CHECK(ht::cuda::launch_cross_entropy_backward(logits.data<float>(), targets.data<std::int32_t>(),
                                                        lse.data<float>(), dloss, dlogits.data<float>(), n, v,
                                                        shard.real_rows(v), shard.start, ignored_id(o), eps, uniform,
                                                        stream));
}

}  // namespace ht::ops::cuda
