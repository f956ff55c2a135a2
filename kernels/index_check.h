// Private: the range checks of device-resident indices (token ids, targets).
//
// - first_out_of_range: checked before use, one host wait; a bad index
//   throws ht::Error before any output is touched, as on the CPU
//   (index-select).
// - record_out_of_range: no host wait; the kernels skip a bad index and the
//   first is kept in the device's IndexErrorRecord until
//   ht::ops::raise_index_errors reads it, once per training step
//   (embedding and cross-entropy, so that a step's forward and backward
//   never wait).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "core/cuda_check.h"
#include "core/cuda_sync.h"
#include "ht/core/tensor.h"
#include "launch.h"

namespace ht::cuda {

/// The ops that record index errors, each in a record of its own, so that
/// one op's position, range and row length never mix with another's.
enum class IndexOp : int { kEmbedding, kCrossEntropy, kCount };

/// The kCount records of CUDA device `device`, by IndexOp: allocated and
/// cleared on first use, kept for the process's life. Thread-safe.
IndexErrorRecord* index_error_records(int device);

/// Records the lowest position of `ids` (i32, on the current device, fewer
/// than 2^31) whose id lies outside [0, limit) in the device's record, with
/// `row_length` positions per batch row; `allowed` (an ignore index) is no
/// error. Enqueued on `stream`; the host does not wait.
inline void record_out_of_range(const Tensor& ids, std::int64_t limit, std::int64_t row_length, IndexOp op,
                                cudaStream_t stream, std::int64_t allowed = kNoIgnore) {
  HT_CUDA_CHECK(launch_record_out_of_range(ids.data<std::int32_t>(), ids.numel(), limit, row_length,
                                           index_error_records(ids.device().index) + int(op), stream, allowed));
}

struct BadIndex {
  std::int64_t position;  // flat index into the ids
  std::int32_t value;
};

/// The first element of `ids` (i32, on the current device) outside [0, limit),
/// or nothing. A kernel lowers one device word with atomicMin; reading it back
/// synchronises `stream` — the one wait these ops impose on the host, and it
/// covers only the check, not the op's own kernels launched after it.
inline std::optional<BadIndex> first_out_of_range(const Tensor& ids, std::int64_t limit, cudaStream_t stream) {
  const Tensor word = Tensor::empty({2}, DType::kI32, ids.device(), MemCategory::kActivations);  // 8 bytes
  auto* first_bad = static_cast<unsigned long long*>(word.data_ptr());  // device blocks are aligned for any type
  HT_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), stream));
  const std::int32_t* p = ids.data<std::int32_t>();
  HT_CUDA_CHECK(launch_find_out_of_range(p, ids.numel(), limit, first_bad, stream));
  unsigned long long position = 0;
  HT_CUDA_CHECK(cudaMemcpyAsync(&position, first_bad, sizeof position, cudaMemcpyDeviceToHost, stream));
  ht::cuda::synchronize_stream(stream);
  if (position == std::numeric_limits<unsigned long long>::max()) return std::nullopt;
  std::int32_t value = 0;  // the error path only: fetch the offending id for the message
  HT_CUDA_CHECK(cudaMemcpyAsync(&value, p + position, sizeof value, cudaMemcpyDeviceToHost, stream));
  ht::cuda::synchronize_stream(stream);
  return BadIndex{std::int64_t(position), value};
}

}  // namespace ht::cuda
