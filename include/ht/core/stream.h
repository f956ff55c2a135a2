// The device stream this thread's CUDA work is enqueued on, public without
// CUDA headers: every CUDA op, tensor copy and fill, and every collective's
// wait on a CUDA communicator is ordered on the calling thread's current
// stream. A program that runs compute on a stream of its own makes it current
// here; in a build without CUDA the handle is kept and never used.
#pragma once

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
