// Private: how CUDA kernels report an out-of-range index (a token id, a
// target) to a host driver that must throw: a device word that kernels lower
// with atomicMin, read back after the kernel. Reading it synchronises the
// stream — the one place where these ops wait for the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "core/cuda_check.h"
#include "ht/core/tensor.h"

namespace ht::cuda {

class FirstBadIndex {
 public:
  /// Allocates the word on `device` and sets it to "none" (all ones), on `stream`.
  FirstBadIndex(Device device, cudaStream_t stream)
      : word_(Tensor::empty({2}, DType::kI32, device, MemCategory::kActivations)), stream_(stream) {
    HT_CUDA_CHECK(cudaMemsetAsync(word_.data_ptr(), 0xff, sizeof(unsigned long long), stream_));
  }

  /// The word for kernels: 8 bytes, suitably aligned (cudaMalloc aligns to 256).
  unsigned long long* device_word() const { return static_cast<unsigned long long*>(word_.data_ptr()); }

  /// Waits for the stream and returns the smallest position reported, or -1.
  std::int64_t read() const {
    unsigned long long v = 0;
    HT_CUDA_CHECK(cudaMemcpyAsync(&v, device_word(), sizeof v, cudaMemcpyDeviceToHost, stream_));
    HT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return v == std::numeric_limits<unsigned long long>::max() ? -1 : std::int64_t(v);
  }

 private:
  Tensor word_;
  cudaStream_t stream_;
};

/// ids[i] of a device i32 array, for an error message; synchronises `stream`.
inline std::int32_t read_device_i32(const std::int32_t* ids, std::int64_t i, cudaStream_t stream) {
  std::int32_t v = 0;
  HT_CUDA_CHECK(cudaMemcpyAsync(&v, ids + i, sizeof v, cudaMemcpyDeviceToHost, stream));
  HT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return v;
}

}  // namespace ht::cuda
