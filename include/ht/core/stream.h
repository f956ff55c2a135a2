// The device stream this thread's CUDA work is enqueued on, public without
// CUDA headers: every CUDA op, tensor copy and fill, and every collective's
// wait on a CUDA communicator is ordered on the calling thread's current
// stream. A program that runs compute on a stream of its own makes it current
// here; in a build without CUDA the handle is kept and never used.
//
// Device memory is stream-ordered too (include/ht/core/allocator.h): a
// tensor's block is allocated and freed on the current stream of the thread
// that creates or destroys it.
#pragma once

#include "ht/core/device.h"

namespace ht {

/// A CUDA stream (cudaStream_t, which is a pointer) as an opaque handle; null
/// is the legacy default stream.
using StreamHandle = void*;

/// The calling thread's current stream; null (the legacy default stream)
/// until set. Thread-local: other threads are not affected. Never throws.
StreamHandle current_stream() noexcept;
/// Makes `stream` the calling thread's current stream from now on. The
/// stream must belong to the device of the tensors later passed to ops, and
/// the caller keeps it alive while it is current. Never throws.
void set_current_stream(StreamHandle stream) noexcept;

/// Owns one CUDA stream created for a program's compute (the training job
/// runs its steps on one, made current with a StreamGuard). Move-only; the
/// destructor destroys the stream without waiting (work already enqueued on
/// it still completes) and never throws.
///
/// The stream is a blocking one (cudaStreamDefault, not cudaStreamNonBlocking):
/// the legacy default stream waits for it and it waits for the legacy default
/// stream. So tensors made before it became current (allocated and filled on
/// the default stream) are ready when it uses them, and tensors freed after
/// its guard ended (on the default stream) are freed after its work. Destroy
/// the StreamGuard before the Stream (declare the Stream first).
class Stream {
 public:
  /// No stream: handle() is null (the legacy default stream).
  Stream() = default;
  /// Creates a stream on `device` if it is a CUDA device; for the CPU, or in
  /// a build without CUDA for a CPU device, holds none (handle() is null).
  /// Throws ht::Error(kCuda) if the stream cannot be created, kNotSupported
  /// for a CUDA device in a build without CUDA.
  explicit Stream(Device device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamHandle handle() const noexcept { return handle_; }
  Device device() const noexcept { return device_; }

 private:
  void reset() noexcept;

  StreamHandle handle_ = nullptr;
  Device device_;
};

/// Makes a stream current for the guard's lifetime, then restores the one
/// that was current before.
class StreamGuard {
 public:
  explicit StreamGuard(StreamHandle stream) noexcept : previous_(current_stream()) { set_current_stream(stream); }
  ~StreamGuard() { set_current_stream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  StreamHandle previous_;
};

}  // namespace ht
