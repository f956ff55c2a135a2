// Private: the one way library code makes the host wait for the device, so
// that every such wait is counted (allocator_stats(kCUDA)) and a test can
// assert that a steady training step makes none it did not mean to.
// Compiled only with CUDA.
#pragma once

#include <cuda_runtime.h>

namespace ht::cuda {

/// Waits until the work enqueued on `stream` so far has completed (needed
/// before the host reads a buffer the stream writes). Counts one stream
/// synchronisation. Throws ht::Error(kCuda) with the runtime's error.
void synchronize_stream(cudaStream_t stream);
/// Waits until all work on the current device has completed. Counts one
/// device synchronisation. Throws ht::Error(kCuda) with the runtime's error.
void synchronize_device();

}  // namespace ht::cuda
