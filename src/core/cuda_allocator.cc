// Stream-ordered CUDA memory (one memory pool per device, kept reserved),
// pinned host blocks and their fences, the counted synchronisation helpers,
// and the CUDA row of allocator_stats().
//
// Why a pool: cudaFree synchronises the whole device, and a training step
// frees every activation of its forward; cudaFreeAsync into a pool whose
// release threshold is UINT64_MAX returns the block to the pool in stream
// order, and the next step's cudaMallocAsync of the same sizes is served from
// it without a driver call. Each device gets a pool of its own (not the
// device's default pool) so that the reserved and used figures are
// hypertrain's alone and other code using the default pool keeps its
// settings.
//
// Never run on a GPU when written (the build machine had none).
#include "core/cuda_allocator.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/cuda_sync.h"

namespace ht::cuda {
namespace {

// Devices beyond this ordinal use cudaMalloc/cudaFree (no node has this many).
constexpr int kMaxPooledDevices = 64;

struct DevicePool {
  std::once_flag once;
  cudaMemPool_t pool = nullptr;
  std::atomic<bool> pooled{false};  // false: the device has no memory pools (cudaMalloc/cudaFree); set after `pool`
  std::atomic<std::uint64_t> reserved_seen{0};  // the pool's largest reserved size counted so far
};

std::array<DevicePool, kMaxPooledDevices>& pools() {
  static auto* const instance = new std::array<DevicePool, kMaxPooledDevices>();  // never destroyed: see host_allocator.cc
  return *instance;
}

struct Counters {
  std::atomic<std::int64_t> system_allocations{0};
  std::atomic<std::int64_t> system_frees{0};
  std::atomic<std::int64_t> cache_hits{0};
  std::atomic<std::int64_t> stream_synchronizations{0};
  std::atomic<std::int64_t> device_synchronizations{0};
};
Counters g_counters;

// A deallocation cannot throw; its failure is reported once per kind, then
// only counted by the sticky error the next checked call will raise.
void report_once(std::atomic<bool>& reported, const char* call, cudaError_t err) noexcept {
  if (reported.exchange(true)) return;
  std::fprintf(stderr, "hypertrain: %s failed: %s (%s); the memory may be leaked, and later failures of this call are "
                       "not reported\n",
               call, cudaGetErrorString(err), cudaGetErrorName(err));
}
std::atomic<bool> g_free_reported{false}, g_free_async_reported{false}, g_free_host_reported{false};

// Creates the pool of `device` (the current device) at its first use. A
// device without pool support, or a failure to set the pool up, leaves
// cudaMalloc in use: slower, still correct.
void init_pool(DevicePool& p, int device) noexcept {
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess || !supported) {
    cudaGetLastError();
    return;
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  // Keep everything freed: memory goes back to the driver only on empty_cache().
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) != cudaSuccess) {
    cudaGetLastError();
    cudaMemPoolDestroy(pool);
    return;
  }
  p.pool = pool;
  p.pooled.store(true);
}

DevicePool* pool_of(int device) noexcept {
  if (device < 0 || device >= kMaxPooledDevices) return nullptr;
  DevicePool& p = pools()[std::size_t(device)];
  std::call_once(p.once, [&] { init_pool(p, device); });
  return p.pooled ? &p : nullptr;
}

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) noexcept {
  std::uint64_t value = 0;
  if (cudaMemPoolGetAttribute(pool, attr, &value) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return value;
}

// Makes `device` current for a scope without throwing; restores the previous one.
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int device) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) {
      ok_ = cudaSetDevice(device) == cudaSuccess;
      if (!ok_) cudaGetLastError();
    } else {
      previous_ = -1;  // nothing to restore
    }
  }
  ~QuietDeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;
  bool ok() const noexcept { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = true;
};

cudaError_t allocate_once(void** ptr, std::size_t bytes, DevicePool* p) noexcept {
  if (!p) {
    const cudaError_t err = cudaMalloc(ptr, bytes);
    if (err == cudaSuccess) g_counters.system_allocations.fetch_add(1, std::memory_order_relaxed);
    return err;
  }
  const cudaError_t err = cudaMallocFromPoolAsync(ptr, bytes, p->pool, current_stream());
  if (err != cudaSuccess) return err;
  // The pool grew iff its reserved size passed the largest one counted. Two
  // threads growing it at once may be counted as one growth; a steady state
  // (no growth at all) is counted exactly.
  const std::uint64_t reserved = pool_attribute(p->pool, cudaMemPoolAttrReservedMemCurrent);
  std::uint64_t seen = p->reserved_seen.load();
  bool grew = false;
  while (reserved > seen && !(grew = p->reserved_seen.compare_exchange_weak(seen, reserved))) {
  }
  (grew ? g_counters.system_allocations : g_counters.cache_hits).fetch_add(1, std::memory_order_relaxed);
  return cudaSuccess;
}

}  // namespace

cudaError_t device_allocate(void** ptr, std::size_t bytes, int device) noexcept {
  *ptr = nullptr;
  const QuietDeviceGuard guard(device);
  if (!guard.ok()) return cudaErrorInvalidDevice;
  DevicePool* p = pool_of(device);
  cudaError_t err = allocate_once(ptr, bytes, p);
  if (err == cudaErrorMemoryAllocation) {
    // Blocks freed on other streams return to the pool only once those
    // streams reach the frees: wait for them, then try once more.
    cudaGetLastError();
    if (cudaDeviceSynchronize() == cudaSuccess) {
      g_counters.device_synchronizations.fetch_add(1, std::memory_order_relaxed);
      err = allocate_once(ptr, bytes, p);
    }
  }
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky state: the caller raises the error
    *ptr = nullptr;
  }
  return err;
}

void device_free(void* ptr, int device) noexcept {
  const QuietDeviceGuard guard(device);
  if (pool_of(device)) {
    if (const cudaError_t err = cudaFreeAsync(ptr, current_stream()); err != cudaSuccess) {
      cudaGetLastError();
      report_once(g_free_async_reported, "cudaFreeAsync", err);
    }
    return;
  }
  const cudaError_t err = cudaFree(ptr);
  g_counters.system_frees.fetch_add(1, std::memory_order_relaxed);
  g_counters.device_synchronizations.fetch_add(1, std::memory_order_relaxed);  // cudaFree waits for the device
  if (err != cudaSuccess) {
    cudaGetLastError();
    report_once(g_free_reported, "cudaFree", err);
  }
}

cudaError_t pinned_allocate(void** ptr, std::size_t bytes) noexcept {
  const cudaError_t err = cudaMallocHost(ptr, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    *ptr = nullptr;
  }
  return err;
}

void pinned_free(void* ptr) noexcept {
  if (const cudaError_t err = cudaFreeHost(ptr); err != cudaSuccess) {
    cudaGetLastError();
    report_once(g_free_host_reported, "cudaFreeHost", err);
  }
}

void* record_fence() noexcept {
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (cudaEventRecord(event, current_stream()) != cudaSuccess) {
    cudaGetLastError();
    cudaEventDestroy(event);
    return nullptr;
  }
  return event;
}

bool fence_done(void* fence) noexcept {
  if (!fence) return true;
  const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(fence));
  if (q == cudaSuccess) return true;
  cudaGetLastError();  // cudaErrorNotReady, or an error the next checked call reports
  return false;
}

void destroy_fence(void* fence) noexcept {
  if (fence && cudaEventDestroy(static_cast<cudaEvent_t>(fence)) != cudaSuccess) cudaGetLastError();
}

void count_stream_synchronization() noexcept {
  g_counters.stream_synchronizations.fetch_add(1, std::memory_order_relaxed);
}

void count_device_synchronization() noexcept {
  g_counters.device_synchronizations.fetch_add(1, std::memory_order_relaxed);
}

void synchronize_stream(cudaStream_t stream) {
  count_stream_synchronization();
  HT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void synchronize_device() {
  count_device_synchronization();
  HT_CUDA_CHECK(cudaDeviceSynchronize());
}

AllocatorStats device_allocator_stats() noexcept {
  AllocatorStats s;
  s.system_allocations = g_counters.system_allocations.load();
  s.system_frees = g_counters.system_frees.load();
  s.cache_hits = g_counters.cache_hits.load();
  s.stream_synchronizations = g_counters.stream_synchronizations.load();
  s.device_synchronizations = g_counters.device_synchronizations.load();
  for (DevicePool& p : pools()) {
    if (!p.pooled) continue;  // set once, before any block of the pool exists
    s.cached_bytes += std::int64_t(pool_attribute(p.pool, cudaMemPoolAttrReservedMemCurrent) -
                                   pool_attribute(p.pool, cudaMemPoolAttrUsedMemCurrent));
  }
  return s;
}

void empty_device_cache() {
  for (int d = 0; d < kMaxPooledDevices; ++d) {
    DevicePool& p = pools()[std::size_t(d)];
    if (!p.pooled) continue;
    const QuietDeviceGuard guard(d);
    HT_CHECK(guard.ok(), ErrorKind::kCuda, "empty_cache: cannot make CUDA device {} current", d);
    synchronize_device();  // frees still in flight return their blocks to the pool
    HT_CUDA_CHECK(cudaMemPoolTrimTo(p.pool, 0));
    p.reserved_seen.store(pool_attribute(p.pool, cudaMemPoolAttrReservedMemCurrent));
  }
}

}  // namespace ht::cuda
