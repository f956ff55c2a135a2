// The emulated device's execution model, as kernels see it (through the
// built-ins of cuda_runtime.h) and as launches reach it.
//
// A grid's blocks run on a pool of host threads, one block at a time per
// host thread; each CUDA thread of a block is a fiber on that host thread.
// A fiber runs until it reaches a barrier, a warp operation or its end, so
// the block's threads interleave only where CUDA lets them synchronise, and
// an order in which they run can be chosen (HT_EMU_SCHEDULE_SEED): a result
// that changes with the order is a race. Whatever a GPU would leave undefined
// and this model can see is an error naming the kernel, the block and the
// thread: a __syncthreads that some threads of the block never reach, a warp
// operation whose lanes disagree on the mask or read an inactive lane, a
// deadlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>

// Included by cuda_runtime.h, after the types it uses.

namespace ht::emu {

struct Block {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned char* dynamic_shared = nullptr;
};

/// One CUDA thread, as the built-ins read it.
struct Thread {
  uint3 thread_idx;
  Block* block = nullptr;
};

namespace detail {
extern thread_local Thread* current;
[[noreturn]] void outside_kernel(const char* what);
}  // namespace detail

/// The CUDA thread running on this host thread; an error outside a kernel.
inline Thread& current_thread() {
  if (!detail::current) detail::outside_kernel("a CUDA built-in (threadIdx, __syncthreads, ...)");
  return *detail::current;
}

/// This block's dynamic shared memory (the launch's third argument, bytes).
template <typename T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(current_thread().block->dynamic_shared);
}

/// __syncthreads(): every thread of the block must reach it.
void sync_block();

enum class WarpOp { kSync, kBallot, kIndex, kXor, kDown, kUp };
/// A warp-wide operation of the lanes in `mask` (which must include the
/// caller, and all of whose lanes must make the same call): kSync waits,
/// kBallot returns the lanes whose `value` is nonzero, the shuffles return
/// the `value` of the lane they name (width: the shuffle's segment size).
std::uint64_t warp_collective(unsigned mask, std::uint64_t value, WarpOp op, int arg, int width);
/// The lanes of the caller's warp that have not exited.
unsigned active_mask();

template <typename T>
T shuffle(unsigned mask, T v, WarpOp op, int arg, int width) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t), "shuffles carry at most 64 bits");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_collective(mask, bits, op, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

/// Enqueues host work on a stream, in order with its kernels and copies (the
/// emulated libraries' calls: cuBLAS, CUB, NCCL).
cudaError_t enqueue_work(CUstream_st* stream, std::function<void()> work);

/// The order in which the threads of each block run from the next launch
/// on: 0 (the default, or HT_EMU_SCHEDULE_SEED) in order of their index,
/// else shuffled anew at every barrier from this seed. A kernel whose result
/// changes with the seed has a race.
void set_schedule_seed(std::uint64_t seed);

// Launches ------------------------------------------------------------------

struct LaunchConfig {
  const char* kernel = "";  // the kernel's name as written at the launch
  const void* function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  std::size_t dynamic_shared_bytes = 0;
  CUstream_st* stream = nullptr;
};

/// Checks the configuration like the runtime (an error is this host
/// thread's last error, and nothing runs), then enqueues `body` to run as
/// every thread of the grid on the configuration's stream.
cudaError_t launch_kernel(const LaunchConfig& config, std::function<void()> body);

LaunchConfig make_config(const char* name, const void* function, dim3 grid, dim3 block, std::size_t smem,
                         CUstream_st* stream);

/// What `kernel<<<grid, block, smem, stream>>>` becomes: called with the
/// kernel's arguments, converted to its parameters as a call would be, it
/// enqueues the grid.
template <typename... P>
struct Launch {
  LaunchConfig config;
  void (*kernel)(P...);
  cudaError_t operator()(P... args) const {
    auto k = kernel;
    return launch_kernel(config, [k, params = std::tuple<P...>(args...)] { std::apply(k, params); });
  }
};
template <typename... P>
Launch<P...> launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem = 0,
                    CUstream_st* stream = nullptr) {
  return {make_config(name, reinterpret_cast<const void*>(kernel), grid, block, smem, stream), kernel};
}

/// The same for a kernel template whose arguments are deduced from the call:
/// `call` is a generic lambda calling the kernel, the arguments are copied.
/// (Its address is unknown, so cudaFuncSetAttribute cannot raise its limits.)
template <typename Call>
struct DeducedLaunch {
  LaunchConfig config;
  Call call;
  template <typename... A>
  cudaError_t operator()(A... args) const {
    return launch_kernel(config, [c = call, params = std::tuple<A...>(args...)] { std::apply(c, params); });
  }
};
template <typename Call>
DeducedLaunch<Call> launch_deduced(const char* name, Call call, dim3 grid, dim3 block, std::size_t smem = 0,
                                   CUstream_st* stream = nullptr) {
  return {make_config(name, nullptr, grid, block, smem, stream), call};
}

}  // namespace ht::emu
