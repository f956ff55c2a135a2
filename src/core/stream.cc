// ht::current_stream: one thread-local handle, the only record of the
// current stream (ht::cuda::current_stream reads it as a cudaStream_t); and
// ht::Stream, the owner of a created stream.
#include "ht/core/stream.h"

#include <utility>

#include "ht/config.h"
#include "ht/core/error.h"
#if HT_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#endif

namespace ht {
namespace {

StreamHandle& thread_stream() noexcept {
  thread_local StreamHandle stream = nullptr;
  return stream;
}

}  // namespace

StreamHandle current_stream() noexcept { return thread_stream(); }

void set_current_stream(StreamHandle stream) noexcept { thread_stream() = stream; }

Stream::Stream(Device device) : device_(device) {
  if (device.is_cpu()) return;
#if HT_HAVE_CUDA
  int previous = 0;
  HT_CUDA_CHECK(cudaGetDevice(&previous));
  HT_CUDA_CHECK(cudaSetDevice(device.index));
  cudaStream_t stream = nullptr;
  const cudaError_t err = cudaStreamCreate(&stream);
  cudaSetDevice(previous);  // valid: it was current before
  HT_CUDA_CHECK(err);
  handle_ = stream;
#else
  throw Error(ErrorKind::kNotSupported,
              fmt::format("a stream on {} was requested but this build of hypertrain has no CUDA backend; use device cpu",
                          device.str()));
#endif
}

Stream::~Stream() { reset(); }

Stream::Stream(Stream&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    reset();
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Stream::reset() noexcept {
#if HT_HAVE_CUDA
  // Errors are ignored: this may run after the device was reset, and a
  // destructor must not throw.
  if (handle_ && cudaStreamDestroy(static_cast<cudaStream_t>(handle_)) != cudaSuccess) cudaGetLastError();
#endif
  handle_ = nullptr;
}

}  // namespace ht
