// Per-thread CUDA state: current stream, cuBLAS handles per device, and the
// device guard used by every CUDA driver.
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "ht/core/stream.h"

namespace ht::cuda {
namespace {

// One cuBLAS handle per device, and the stream it was last bound to, so that
// cublasSetStream is called only when the thread's current stream changed.
struct DeviceSlot {
  CublasHandle handle;
  cudaStream_t bound_stream = nullptr;
};

struct ThreadState {
  std::vector<DeviceSlot> devices;  // indexed by device ordinal; destroyed at thread exit
};

ThreadState& thread_state() {
  // Thread-local destructors run before the process's static destructors and
  // atexit handlers (where the CUDA runtime tears itself down), so the main
  // thread's handles are destroyed while the runtime is still alive.
  thread_local ThreadState state;
  return state;
}

}  // namespace

void set_current_stream(cudaStream_t stream) noexcept { ht::set_current_stream(stream); }

cudaStream_t current_stream() noexcept { return static_cast<cudaStream_t>(ht::current_stream()); }

CublasHandle::CublasHandle(int device) : device_(device) {
  HT_CUDA_CHECK(cudaSetDevice(device));
  HT_CUBLAS_CHECK(::ht::detail::cublas().create(&handle_));
  // f16 and bf16 GEMMs accumulate in f32 (CUBLAS_COMPUTE_32F), but cuBLAS may
  // still reduce split-K partial sums in the output's 16-bit type unless
  // told not to; keep every reduction in f32, as the CPU reference does.
  const cublasStatus_t mode =
      ::ht::detail::cublas().set_math_mode(handle_,
                                     cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  if (mode != CUBLAS_STATUS_SUCCESS) {
    ::ht::detail::cublas().destroy(handle_);
    handle_ = nullptr;
    device_ = -1;
    HT_CUBLAS_CHECK(mode);
  }
}

CublasHandle::~CublasHandle() { reset(); }

CublasHandle::CublasHandle(CublasHandle&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), device_(std::exchange(other.device_, -1)) {}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    reset();
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

void CublasHandle::reset() noexcept {
  if (!handle_) return;
  // cuBLAS expects its handle's device to be current when it is destroyed.
  // Errors are ignored: this runs at thread exit, possibly after the
  // application reset the device, and a destructor must not throw.
  int previous = -1;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  ::ht::detail::cublas().destroy(handle_);  // opened: a handle exists
  if (switched) cudaSetDevice(previous);
  cudaGetLastError();  // leave no sticky error from the calls above
  handle_ = nullptr;
  device_ = -1;
}

cublasHandle_t cublas_handle() {
  ThreadState& state = thread_state();
  int device = 0;
  HT_CUDA_CHECK(cudaGetDevice(&device));
  if (std::size_t(device) >= state.devices.size()) state.devices.resize(std::size_t(device) + 1);
  DeviceSlot& slot = state.devices[std::size_t(device)];
  if (!slot.handle.get()) {
    slot.handle = CublasHandle(device);
    slot.bound_stream = nullptr;  // a new handle works on stream 0
  }
  const cudaStream_t stream = current_stream();
  if (slot.bound_stream != stream) {
    HT_CUBLAS_CHECK(::ht::detail::cublas().set_stream(slot.handle.get(), stream));
    slot.bound_stream = stream;
  }
  return slot.handle.get();
}

DeviceGuard::DeviceGuard(Device device) {
  int current = 0;
  HT_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) {
    HT_CUDA_CHECK(cudaSetDevice(device.index));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // a destructor must not throw; the device was valid before
}

}  // namespace ht::cuda
