// Private: the CUDA execution state of each host thread — the stream every op
// is enqueued on (the public ht::current_stream, typed), and one cuBLAS
// handle per device bound to that stream — plus a guard that makes a
// tensor's device current for the length of an op.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "ht/core/device.h"

namespace ht::cuda {

/// Makes `stream` the stream on which the calling thread's CUDA ops are
/// enqueued from now on; 0 (the initial value) is the legacy default stream.
/// The stream must belong to the device of the tensors later passed to ops,
/// and the caller keeps it alive while it is current. Thread-local: other
/// threads are not affected. Never throws.
void set_current_stream(cudaStream_t stream) noexcept;
/// The calling thread's current stream (0, the legacy default stream, unless set).
cudaStream_t current_stream() noexcept;

/// Owns one cuBLAS handle, created on one device. Move-only; the destructor
/// destroys the handle on its device and never throws.
class CublasHandle {
 public:
  CublasHandle() = default;
  /// Creates a handle on `device` (which becomes the current device). Throws
  /// ht::Error(kCuda) if cuBLAS cannot be initialised.
  explicit CublasHandle(int device);
  ~CublasHandle();
  CublasHandle(CublasHandle&& other) noexcept;
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  cublasHandle_t get() const noexcept { return handle_; }
  int device() const noexcept { return device_; }

 private:
  void reset() noexcept;

  cublasHandle_t handle_ = nullptr;
  int device_ = -1;
};

/// The calling thread's cuBLAS handle for the current device, created on first
/// use and bound to current_stream() (rebound whenever that changed). It lives
/// until the thread exits. The handle keeps cuBLAS's default per-stream
/// workspaces: a single user workspace would be raced by two streams.
cublasHandle_t cublas_handle();

/// Makes `device` the current CUDA device until the guard is destroyed, then
/// restores the previous one. Throws ht::Error(kCuda) if the device cannot be set.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace ht::cuda
