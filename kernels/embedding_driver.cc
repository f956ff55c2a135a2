// CUDA embedding driver. Forward checks the token ids on the device before
// the gather; backward brings them to the host, checks them there and groups
// positions by token, which makes the scatter deterministic (and equal to the
// CPU's bits) without atomics. Ids are checked against the full vocabulary
// (shard.size); only those of the shard's rows are gathered or scattered.
#include <limits>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/cuda_sync.h"
#include "index_check.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {
namespace {

[[noreturn]] void throw_bad_token(std::int32_t id, std::int64_t i, std::int64_t t, std::int64_t vocab) {
  throw Error(ErrorKind::kOutOfRange,
              fmt::format("embedding: token id {} at batch row {}, position {} is outside the vocabulary [0, {}); "
                          "check the dataset's tokenizer against the model's vocab_size",
                          id, i / t, i % t, vocab));
}

// Positions grouped by token, in one i32 buffer: order (positions) lists
// positions token by token, increasing within a token; seg_start (segments +
// 1) and seg_token (segments) delimit and name each distinct token's run by
// its local row (id - start). Only tokens in the shard's rows [start, start +
// rows) take part. A counting sort: O(n + rows) host work. Example: ids
// [5, 2, 5], unsharded -> order [1, 0, 2], seg_start [0, 1, 3], seg_token
// [2, 5]; with start 4, rows 3 -> order [0, 2], seg_start [0, 2], seg_token [1].
struct Segments {
  std::vector<std::int32_t> plan;
  std::int64_t positions = 0;
  std::int64_t segments = 0;
};

Segments group_by_token(const std::vector<std::int32_t>& ids, std::int64_t start, std::int64_t rows) {
  const auto local = [&](std::int32_t id) { return std::int64_t(id) - start; };  // the row in the shard
  const auto held = [&](std::int32_t id) { return local(id) >= 0 && local(id) < rows; };
  std::vector<std::int32_t> slot(std::size_t(rows), 0);  // first a count per row, then a cursor
  std::int64_t n = 0;                                   // positions whose token this shard holds
  for (std::int32_t id : ids) {
    if (!held(id)) continue;
    ++slot[std::size_t(local(id))];
    ++n;
  }
  std::int64_t segments = 0;
  for (std::int32_t c : slot) segments += c > 0;
  Segments s;
  s.positions = n;
  s.segments = segments;
  s.plan.resize(std::size_t(n + 2 * segments + 1));
  std::int32_t* order = s.plan.data();
  std::int32_t* seg_start = order + n;
  std::int32_t* seg_token = seg_start + segments + 1;
  std::int32_t running = 0;
  std::int64_t k = 0;
  for (std::int64_t v = 0; v < rows; ++v) {
    const std::int32_t count = slot[std::size_t(v)];
    if (count == 0) continue;
    seg_start[k] = running;
    seg_token[k] = std::int32_t(v);
    ++k;
    slot[std::size_t(v)] = running;
    running += count;
  }
  seg_start[segments] = running;
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (held(ids[i])) order[slot[std::size_t(local(ids[i]))]++] = std::int32_t(i);
  return s;
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out, VocabShard shard) {
  const std::int64_t t = tokens.size(1), n = tokens.numel(), c = wte.size(1), vocab = shard.size;
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(tokens.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  if (const auto bad = ht::cuda::first_out_of_range(tokens, vocab, stream))
    throw_bad_token(bad->value, bad->position, t, vocab);
  HT_CUDA_CHECK(ht::cuda::launch_embedding_forward(tokens.data<std::int32_t>(), wte.data<float>(),
                                                   wpe.defined() ? wpe.data<float>() : nullptr, out.data<float>(), n,
                                                   t, c, shard.start, wte.size(0), stream));
}

void embedding_backward(const Tensor& dout, const Tensor& tokens, Tensor& dwte, Tensor& dwpe, VocabShard shard) {
  const std::int64_t b = tokens.size(0), t = tokens.size(1), n = tokens.numel(), c = dwte.size(1),
                     vocab = shard.size;
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(tokens.device());
  const cudaStream_t stream = ht::cuda::current_stream();
  // The ids come to the host once: to check them, and to plan the scatter.
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  HT_CUDA_CHECK(cudaMemcpyAsync(ids.data(), tokens.data_ptr(), std::size_t(n) * sizeof(std::int32_t),
                                cudaMemcpyDeviceToHost, stream));
  ht::cuda::synchronize_stream(stream);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t id = ids[std::size_t(i)];
    if (id < 0 || id >= vocab) throw_bad_token(id, i, t, vocab);
  }
  if (c == 0) return;
  HT_CHECK(n <= std::numeric_limits<std::int32_t>::max(), ErrorKind::kNotSupported,
           "embedding_backward: {} positions (batch {} x sequence {}) exceed the 2^31-1 the CUDA scatter indexes; "
           "split the batch",
           n, b, t);
  const Segments seg = group_by_token(ids, shard.start, dwte.size(0));
  Tensor plan = Tensor::empty({std::int64_t(seg.plan.size())}, DType::kI32, tokens.device(),
                              MemCategory::kActivations);
  // From pageable memory the copy is staged before the call returns, so
  // seg.plan may be destroyed while the DMA is still in flight.
  HT_CUDA_CHECK(cudaMemcpyAsync(plan.data_ptr(), seg.plan.data(), seg.plan.size() * sizeof(std::int32_t),
                                cudaMemcpyHostToDevice, stream));
  const std::int32_t* order = plan.data<std::int32_t>();
  const std::int32_t* seg_start = order + seg.positions;
  const std::int32_t* seg_token = seg_start + seg.segments + 1;
  HT_CUDA_CHECK(ht::cuda::launch_embedding_backward_wte(dout.data<float>(), order, seg_start, seg_token,
                                                        seg.segments, c, dwte.data<float>(), stream));
  if (dwpe.defined())
    HT_CUDA_CHECK(ht::cuda::launch_embedding_backward_wpe(dout.data<float>(), dwpe.data<float>(), b, t * c, stream));
  // `plan` is freed here, in stream order after the scatter (ht/core/allocator.h).
}

}  // namespace ht::ops::cuda
