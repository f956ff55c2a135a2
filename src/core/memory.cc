// The per-category byte accounting, and the dispatch of each allocation to
// the host allocator or the CUDA pools (include/ht/core/allocator.h).
#include "ht/core/memory.h"

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>

#include "ht/config.h"
#include "core/host_allocator.h"
#include "ht/core/error.h"
#if HT_HAVE_CUDA
#include "core/cuda_allocator.h"
#include "core/cuda_check.h"
#endif

namespace ht {
namespace {

struct Counter {
  std::atomic<std::int64_t> current{0};
  std::atomic<std::int64_t> peak{0};

  void add(std::int64_t bytes) {
    const std::int64_t now = current.fetch_add(bytes) + bytes;
    std::int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
};

// [device type][category], plus one total row per device type.
Counter g_counters[2][kMemCategoryCount];
Counter g_totals[2];

void record(Device device, MemCategory category, std::int64_t bytes) {
  const int d = device.is_cuda() ? 1 : 0;
  g_counters[d][int(category)].add(bytes);
  g_totals[d].add(bytes);
}

[[noreturn]] void throw_oom(std::size_t bytes, Device device, MemCategory category, std::string native = {}) {
  const MemStats total = memory_stats_total(device.type);
  throw Error(ErrorKind::kOutOfMemory,
              fmt::format("cannot allocate {} bytes of {} on {} ({} bytes in use there); reduce the "
                          "micro-batch size, model size or sequence length, or shard state with ZeRO",
                          bytes, mem_category_name(category), device.str(), total.current_bytes),
              std::source_location::current(), std::move(native));
}

#if HT_HAVE_CUDA
[[noreturn]] void throw_oom(std::size_t bytes, Device device, MemCategory category, cudaError_t err) {
  throw_oom(bytes, device, category, fmt::format("{} ({})", cudaGetErrorName(err), int(err)));
}
#endif

// Page-locked host memory needs a CUDA device; without one, plain memory serves.
bool pinned(HostMemory host) { return host == HostMemory::kPinned && cuda_device_count() > 0; }

}  // namespace

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParameters: return "parameters";
    case MemCategory::kGradients: return "gradients";
    case MemCategory::kOptimizerState: return "optimizer_state";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kCommunication: return "communication";
    case MemCategory::kOther: return "other";
  }
  return "?";
}

MemStats memory_stats(DeviceType device, MemCategory category) {
  const Counter& c = g_counters[device == DeviceType::kCUDA ? 1 : 0][int(category)];
  return {c.current.load(), c.peak.load()};
}

MemStats memory_stats_total(DeviceType device) {
  const Counter& c = g_totals[device == DeviceType::kCUDA ? 1 : 0];
  return {c.current.load(), c.peak.load()};
}

void reset_memory_peaks() {
  for (auto& row : g_counters)
    for (auto& c : row) c.peak.store(c.current.load());
  for (auto& c : g_totals) c.peak.store(c.current.load());
}

namespace detail {

// Host blocks come from the host allocator (core/host_allocator.cc: the
// caching allocator or the system's); CUDA blocks from the device's
// stream-ordered pool (core/cuda_allocator.cc). Both count what they do for
// allocator_stats(); this file counts the bytes requested, by category.
void* allocate(std::size_t bytes, Device device, MemCategory category, HostMemory host) {
  void* ptr = nullptr;
  const std::size_t request = bytes == 0 ? 1 : bytes;  // a valid, unique pointer even for empty tensors
  if (device.is_cuda()) {
#if HT_HAVE_CUDA
    const cudaError_t err = cuda::device_allocate(&ptr, request, device.index);
    // Only a lack of memory is an out-of-memory error; anything else (a bad
    // device, a sticky error from an earlier kernel) keeps its CUDA name.
    if (err == cudaErrorMemoryAllocation) throw_oom(bytes, device, category, err);
    if (err != cudaSuccess)
      detail::throw_cuda_error(err, fmt::format("allocating {} bytes of {} on {}", bytes, mem_category_name(category),
                                                device.str()).c_str(),
                               std::source_location::current());
#else
    throw Error(ErrorKind::kNotSupported,
                "a CUDA tensor was requested but this build of hypertrain has no CUDA backend; "
                "rebuild with the CUDA toolkit installed (-DHT_WITH_CUDA=ON) or use device cpu");
#endif
  } else {
    ptr = host_allocate(request, pinned(host));
    if (!ptr) throw_oom(bytes, device, category);
  }
  record(device, category, std::int64_t(bytes));
  return ptr;
}

void deallocate(void* ptr, std::size_t bytes, Device device, MemCategory category, HostMemory host) noexcept {
  if (!ptr) return;
  if (device.is_cuda()) {
#if HT_HAVE_CUDA
    cuda::device_free(ptr, device.index);
#endif
  } else {
    host_deallocate(ptr, bytes == 0 ? 1 : bytes, pinned(host));
  }
  record(device, category, -std::int64_t(bytes));
}

}  // namespace detail
}  // namespace ht
