// Private: move-only owners of the CUDA stream and events the NCCL backend
// uses, and the mapping of hypertrain's dtypes and reduce ops to NCCL's.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "ht/comm/communicator.h"
#include "ht/core/dtype.h"

namespace ht::comm::detail {

/// Owns one non-blocking CUDA stream (no implicit synchronisation with the
/// legacy default stream). The destructor never throws; pending work on the
/// stream still completes after it is destroyed.
class CudaStream {
 public:
  CudaStream() = default;
  /// Creates the stream on `device` (which is left current). Throws ht::Error(kCuda).
  explicit CudaStream(int device);
  ~CudaStream();
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// Owns one CUDA event without timing (the cheapest kind to record and query).
class CudaEvent {
 public:
  CudaEvent() = default;
  /// Creates the event on `device` (which is left current). Throws ht::Error(kCuda).
  explicit CudaEvent(int device);
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

ncclDataType_t to_nccl(DType dtype);
ncclRedOp_t to_nccl(ReduceOp op);

/// A configuration for a non-blocking communicator named `name` (NCCL's logs
/// and profiler show it). NCCL keeps the name's pointer for the
/// communicator's life, which may end on NCCL's own thread after we let go
/// (a non-blocking abort reclaims in the background), so the name is
/// interned for the life of the process.
ncclConfig_t nonblocking_config(const std::string& name);

}  // namespace ht::comm::detail
