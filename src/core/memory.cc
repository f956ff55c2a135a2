// Allocators (host, pinned host, CUDA) and the per-category byte accounting.
#include "ht/core/memory.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "ht/config.h"
#include "ht/core/error.h"
#if HT_HAVE_CUDA
#include "core/cuda_check.h"
#endif

namespace ht {
namespace {

constexpr std::size_t kHostAlignment = 64;  // one cache line; AVX-512 loads

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

[[noreturn]] void throw_oom(std::size_t bytes, Device device, MemCategory category) {
  const MemStats total = memory_stats_total(device.type);
  throw Error(ErrorKind::kOutOfMemory,
              fmt::format("cannot allocate {} bytes of {} on {} ({} bytes in use there); reduce the "
                          "micro-batch size, model size or sequence length, or shard state with ZeRO",
                          bytes, mem_category_name(category), device.str(), total.current_bytes));
}

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

void* allocate(std::size_t bytes, Device device, MemCategory category, HostMemory host) {
  void* ptr = nullptr;
  const std::size_t request = bytes == 0 ? 1 : bytes;  // a valid, unique pointer even for empty tensors
  if (device.is_cuda()) {
#if HT_HAVE_CUDA
    HT_CUDA_CHECK(cudaSetDevice(device.index));
    if (cudaMalloc(&ptr, request) != cudaSuccess) {
      cudaGetLastError();
      throw_oom(bytes, device, category);
    }
#else
    throw Error(ErrorKind::kNotSupported,
                "a CUDA tensor was requested but this build of hypertrain has no CUDA backend; "
                "rebuild with the CUDA toolkit installed (-DHT_WITH_CUDA=ON) or use device cpu");
#endif
  } else if (host == HostMemory::kPinned && cuda_device_count() > 0) {
#if HT_HAVE_CUDA
    if (cudaMallocHost(&ptr, request) != cudaSuccess) {
      cudaGetLastError();
      throw_oom(bytes, device, category);
    }
#endif
  } else {
    const std::size_t rounded = (request + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    ptr = std::aligned_alloc(kHostAlignment, rounded);
    if (!ptr) throw_oom(bytes, device, category);
  }
  record(device, category, std::int64_t(bytes));
  return ptr;
}

void deallocate(void* ptr, std::size_t bytes, Device device, MemCategory category, HostMemory host) noexcept {
  if (!ptr) return;
  if (device.is_cuda()) {
#if HT_HAVE_CUDA
    cudaFree(ptr);
#endif
  } else if (host == HostMemory::kPinned && cuda_device_count() > 0) {
#if HT_HAVE_CUDA
    cudaFreeHost(ptr);
#endif
  } else {
    std::free(ptr);
  }
  record(device, category, -std::int64_t(bytes));
}

}  // namespace detail
}  // namespace ht
