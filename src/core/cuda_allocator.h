// Private: CUDA memory for ht::detail::allocate — stream-ordered device pools,
// pinned host blocks and the fences that guard their reuse — and the
// counters behind allocator_stats(kCUDA). Compiled only with CUDA.
//
// Never run on a GPU when written: the build machine had none. The pool
// calls follow the CUDA runtime documentation (cudaMallocAsync and memory
// pools, "Stream Ordered Memory Allocator"); tests/core/allocator_cuda_test.cc
// checks the steady state on a device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "ht/core/allocator.h"

namespace ht::cuda {

/// `bytes` (> 0) on `device` from its memory pool, ordered on the calling
/// thread's current stream (cudaMalloc where the device has no pools). On
/// failure returns the error, with the runtime's sticky error state cleared,
/// and leaves *ptr null. Restores the calling thread's current device.
cudaError_t device_allocate(void** ptr, std::size_t bytes, int device) noexcept;
/// Frees a block of device_allocate, ordered on the current stream. Never
/// throws: a failure is reported once on stderr.
void device_free(void* ptr, int device) noexcept;

/// Page-locked host memory (cudaMallocHost), counted with the host's system
/// allocations by the caller. Returns the error like device_allocate.
cudaError_t pinned_allocate(void** ptr, std::size_t bytes) noexcept;
/// cudaFreeHost; a failure is reported once on stderr.
void pinned_free(void* ptr) noexcept;

/// An event recorded on the calling thread's current stream (of the current
/// device): it completes once the work enqueued there so far has. Null when
/// none could be recorded (the caller then gives the block back to the
/// system: cudaFreeHost waits for the device). Never throws.
void* record_fence() noexcept;
/// Whether the fence's work has completed (a null fence has). Never throws.
bool fence_done(void* fence) noexcept;
void destroy_fence(void* fence) noexcept;

/// Counts one wait of the host for a stream or a whole device.
void count_stream_synchronization() noexcept;
void count_device_synchronization() noexcept;

/// The CUDA row of allocator_stats().
AllocatorStats device_allocator_stats() noexcept;
/// Waits for every device in use, then trims each pool to its used bytes.
void empty_device_cache();

}  // namespace ht::cuda
