// Byte accounting by category, and the allocators behind every tensor.
//
// Every allocation is tagged with what it holds, so that claims such as "ZeRO-3
// holds 1/N of the model state" or "f16 halves activations" are measured, not
// asserted. Figures are per device (host memory counts as device "cpu"),
// current and peak, updated atomically: reading them is thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ht/core/device.h"

namespace ht {

enum class MemCategory : std::uint8_t {
  kParameters,
  kGradients,
  kOptimizerState,
  kActivations,
  kCommunication,
  kOther,
};
inline constexpr int kMemCategoryCount = 6;

std::string_view mem_category_name(MemCategory c);

struct MemStats {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
};

/// Figures for one category on one device kind (all CUDA devices share one row).
MemStats memory_stats(DeviceType device, MemCategory category);
/// Sum over categories; the peak is the peak of the sum.
MemStats memory_stats_total(DeviceType device);
/// Sets every peak to the current value.
void reset_memory_peaks();

/// Where host buffers come from: plain (64-byte aligned) or pinned (page-locked,
/// for fast asynchronous copies to and from a GPU; plain in a CPU-only build
/// or without a device).
enum class HostMemory : std::uint8_t { kPlain, kPinned };

namespace detail {
/// Allocates `bytes` on `device`, recording them under `category`: host
/// blocks from the host allocator, CUDA blocks from the device's pool in
/// order on the current stream (ht/core/allocator.h). Throws
/// ht::Error(kOutOfMemory) naming the size, category and current usage when
/// memory runs out; any other CUDA failure as ht::Error(kCuda) with its CUDA
/// name. Thread-safe.
void* allocate(std::size_t bytes, Device device, MemCategory category, HostMemory host);
/// Returns a block of allocate (same size, device, category and host kind),
/// from any thread; a CUDA block in order on the current stream. Never
/// throws: a failed CUDA free is reported once on stderr.
void deallocate(void* ptr, std::size_t bytes, Device device, MemCategory category, HostMemory host) noexcept;
}  // namespace detail

}  // namespace ht
