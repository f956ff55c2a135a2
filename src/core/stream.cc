// ht::current_stream: one thread-local handle, the only record of the
// current stream (ht::cuda::current_stream reads it as a cudaStream_t).
#include "ht/core/stream.h"

namespace ht {
namespace {

StreamHandle& thread_stream() noexcept {
  thread_local StreamHandle stream = nullptr;
  return stream;
}

}  // namespace

StreamHandle current_stream() noexcept { return thread_stream(); }

void set_current_stream(StreamHandle stream) noexcept { thread_stream() = stream; }

}  // namespace ht
