// CUDA embedding driver. Neither direction makes the host wait: forward
// records an out-of-range token id on the device for
// ht::ops::raise_index_errors (kernels/index_check.h) instead of checking it
// before the gather, and backward plans its deterministic scatter on the
// device (a radix sort of (row, position) pairs; kernels/embedding.cu), so
// the result equals the CPU's bits without atomics. Ids are checked against
// the full vocabulary (shard.size); only those of the shard's rows are
// gathered or scattered.
#include <limits>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "index_check.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out, VocabShard shard) {
  const std::int64_t t = tokens.size(1), n = tokens.numel(), c = wte.size(1), vocab = shard.size;
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(tokens.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  ht::cuda::record_out_of_range(tokens, vocab, t, ht::cuda::IndexOp::kEmbedding, stream);
  HT_CUDA_CHECK(ht::cuda::launch_embedding_forward(tokens.data<std::int32_t>(), wte.data<float>(),
                                                   wpe.defined() ? wpe.data<float>() : nullptr, out.data<float>(), n,
                                                   t, c, shard.start, wte.size(0), stream));
}

void embedding_backward(const Tensor& dout, const Tensor& tokens, Tensor& dwte, Tensor& dwpe, VocabShard shard) {
  const std::int64_t b = tokens.size(0), t = tokens.size(1), n = tokens.numel(), c = dwte.size(1);
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(tokens.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  // The forward recorded any id outside the vocabulary; the plan skips it.
  if (c == 0) return;
  HT_CHECK(n <= std::numeric_limits<std::int32_t>::max(), ErrorKind::kNotSupported,
           "embedding_backward: {} positions (batch {} x sequence {}) exceed the 2^31-1 the CUDA scatter indexes; "
           "split the batch",
           n, b, t);
  const std::int64_t rows = dwte.size(0);
  const std::size_t bytes = ht::cuda::embedding_plan_scratch_bytes(n, rows);
  const Tensor scratch = Tensor::empty({std::int64_t((bytes + 3) / 4)}, DType::kI32, tokens.device(),
                                       MemCategory::kActivations);  // pool blocks are 256-byte aligned
  HT_CUDA_CHECK(ht::cuda::launch_embedding_backward_wte(dout.data<float>(), tokens.data<std::int32_t>(), n,
                                                        shard.start, rows, c, dwte.data<float>(),
                                                        scratch.data_ptr(), stream));
  if (dwpe.defined())
    HT_CUDA_CHECK(ht::cuda::launch_embedding_backward_wpe(dout.data<float>(), dwpe.data<float>(), b, t * c, stream));
  // `scratch` is freed here, in stream order after the scatter (ht/core/allocator.h).
}

}  // namespace ht::ops::cuda
