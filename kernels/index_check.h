// Private: the range check of device-resident indices (token ids, targets)
// that the CUDA drivers run before using them, so that a bad index throws
// ht::Error before any output is touched, as on the CPU.
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
