// Private to the emulated device: what its parts (runtime, memory, streams,
// kernels, cuBLAS, NCCL) share.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

namespace ht::emu {

// Errors ---------------------------------------------------------------------

/// Sets this host thread's last error (what cudaGetLastError returns and
/// clears) and returns `e`.
cudaError_t set_last_error(cudaError_t e);
/// An error of work that ran on the device (a failed kernel): from now on
/// every call returns it, as after a GPU's sticky error. `what` says what
/// happened; it is printed, and cudaGetErrorString returns it.
void fail_device(cudaError_t e, const std::string& what);
/// The sticky error, or cudaSuccess.
cudaError_t sticky_error();
/// sticky_error() if set, else `e`: the value every API call returns.
cudaError_t result(cudaError_t e);

/// A fault injected into the emulated device (HT_EMU_FAULTS, a comma-separated
/// list): "device-lost" (no work on any stream happens, and the first is
/// a sticky failure, as a GPU that fell off the bus), "gemm-wrong" (cuBLAS's results are off by one in their first
/// element, as silent corruption). For the health checks' tests.
bool fault_injected(const char* name);

// Devices ---------------------------------------------------------------------

int device_count();
/// The limit of a kernel's dynamic shared memory (cudaFuncSetAttribute).
std::size_t max_dynamic_shared(const void* function);
inline constexpr std::size_t kDefaultSharedBytes = 48 * 1024;
inline constexpr std::size_t kMaxSharedBytesOptin = 227 * 1024;
inline constexpr int kMultiProcessors = 132;

// Streams ---------------------------------------------------------------------

/// The stream a handle names (nullptr and cudaStreamLegacy: the legacy
/// default stream), or nullptr for a handle that is not a live stream.
CUstream_st* resolve(cudaStream_t stream);
/// Appends `work` to the stream; it runs after everything enqueued there
/// before (and, for the legacy default stream, everything on the blocking
/// streams before, and the other way round).
void enqueue(CUstream_st* stream, std::function<void()> work);
/// Blocks until the stream has run everything enqueued on it.
void drain(CUstream_st* stream);
/// Blocks until every stream has run everything enqueued on it.
void drain_all();

// Memory ---------------------------------------------------------------------

/// A device allocation: guard pages before and after, filled with a NaN
/// pattern. nullptr when out of memory.
void* device_allocate(std::size_t bytes);
/// Frees (after checking the bytes past its end): its pages are
/// quarantined, so that a later access faults. False: not a live allocation.
bool device_free(void* ptr);
/// Checks that nothing was written past the end of the live allocation at
/// `ptr` (into the bytes before its guard page); else the device fails.
void check_past_end(void* ptr);
/// Bytes of device memory in use.
std::size_t device_bytes_in_use();
inline constexpr std::size_t kDeviceMemoryBytes = std::size_t(80) << 30;

// Kernels --------------------------------------------------------------------

/// The kernel running on this host thread, for error messages ("" outside).
std::string running_kernel_description();

}  // namespace ht::emu
