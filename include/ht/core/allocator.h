// The allocators behind ht::detail::allocate: a caching allocator for host
// memory (plain and pinned), stream-ordered pools for CUDA memory, and their
// exact counters (system calls made, cache hits, bytes held, synchronisations
// the library made), so that "a steady training step allocates nothing" is a
// measured claim.
//
// Host. A freed block goes to a free list of its size class and is handed out
// again to the next request of that class, instead of going back to the C
// library (which unmaps large blocks: each fresh activation then costs a page
// fault per 4 KiB page). Classes follow host_size_class(): four per power of
// two, so rounding wastes under a quarter of a request. The bytes kept free
// are bounded (host_cache_limit_bytes()); a block freed beyond the bound goes
// back to the system. Pinned blocks are cached the same way, in pools of
// their own; a pinned block is handed out again only once the work enqueued
// on the current stream of the thread that freed it has completed (an event
// recorded at the free), so an asynchronous copy from it is never overwritten.
//
// CUDA. Memory comes from each device's default memory pool through
// cudaMallocAsync and goes back through cudaFreeAsync, both ordered on the
// calling thread's ht::current_stream(); the pool's release threshold is
// UINT64_MAX, so freed memory stays reserved for reuse and no free
// synchronises the device. A block allocated on one stream and used on
// another must be ordered by the caller (an event) as for any stream-ordered
// memory. Devices without memory pools fall back to cudaMalloc/cudaFree.
//
// All functions are thread-safe. None of this is part of memory_stats(),
// which counts the bytes requested by live tensors whatever the allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ht/core/device.h"

namespace ht {

/// Where plain and pinned host blocks come from.
enum class HostAllocatorKind : std::uint8_t {
  kSystem,   // std::aligned_alloc / std::free (cudaMallocHost / cudaFreeHost) on every request
  kCaching,  // size-class free lists in front of those (the default)
};

std::string_view host_allocator_name(HostAllocatorKind kind);
/// Parses "system" or "caching"; throws ht::Error(kConfig) otherwise.
HostAllocatorKind parse_host_allocator(std::string_view name);

/// Counters of one device type since the process started (all CUDA devices
/// share one row). Exact: every counted event is counted once, atomically.
struct AllocatorStats {
  /// Blocks obtained from the system: aligned_alloc and cudaMallocHost on the
  /// host; on CUDA, cudaMalloc calls plus allocations that grew a memory
  /// pool's reserved size.
  std::int64_t system_allocations = 0;
  /// Blocks given back to the system: free and cudaFreeHost on the host;
  /// cudaFree calls on CUDA (pool trims by empty_cache are not counted here).
  std::int64_t system_frees = 0;
  /// Requests served from memory already held: a cached host block, or a
  /// cudaMallocAsync the pool served without growing.
  std::int64_t cache_hits = 0;
  /// Bytes held free for reuse now: the host cache's blocks (at their class
  /// sizes), or on CUDA the pools' reserved minus used bytes.
  std::int64_t cached_bytes = 0;
  /// Blocks on the host cache's free lists now (0 on CUDA).
  std::int64_t cached_blocks = 0;
  /// Waits of the host for one stream (reading a device value into a host
  /// buffer, a host-side check of device data). 0 on the host row.
  std::int64_t stream_synchronizations = 0;
  /// Waits of the host for a whole device: explicit ones made by the library,
  /// plus each cudaFree (which synchronises the device). 0 on the host row.
  std::int64_t device_synchronizations = 0;
};

/// The counters for `device` now. Never throws.
AllocatorStats allocator_stats(DeviceType device) noexcept;

/// Which host allocator new requests use; at start, HT_HOST_ALLOCATOR
/// ("system" or "caching", default caching). Blocks are always sized by
/// host_size_class(), so a block from either may be freed under the other.
HostAllocatorKind host_allocator();
/// Switches the host allocator for later requests. Switching to kSystem also
/// returns every cached host block to the system.
void set_host_allocator(HostAllocatorKind kind);

/// Default bound on the bytes the host cache keeps free (plain and pinned
/// together): 4 GiB. A training step's transient blocks are what the cache
/// holds between uses, and they stay well below this on a single host
/// process; set HT_HOST_CACHE_LIMIT or call set_host_cache_limit_bytes when
/// several processes share a node's memory.
inline constexpr std::size_t kDefaultHostCacheLimitBytes = std::size_t(4) << 30;
/// The bound now; at start, HT_HOST_CACHE_LIMIT (bytes, with an optional K,
/// M or G suffix meaning 2^10, 2^20 or 2^30), else the default.
std::size_t host_cache_limit_bytes();
/// Sets the bound; cached blocks beyond it (most recently freed last) are
/// returned to the system now. 0 caches nothing.
void set_host_cache_limit_bytes(std::size_t bytes);

/// The bytes a host request of `bytes` is rounded up to (its size class):
/// a multiple of max(64, 2^(k-2)) where 2^k <= bytes < 2^(k+1). So up to 256
/// bytes, multiples of one 64-byte cache line; above, four classes per power
/// of two (1, 1.25, 1.5, 1.75 times it): 1000 -> 1024, 1025 -> 1280,
/// 5 MiB + 1 -> 6 MiB. The waste is under a quarter of the request (plus
/// under 64 bytes), against up to a half for powers of two.
std::size_t host_size_class(std::size_t bytes);

/// Returns every block held free to the system: the host cache's blocks
/// (kCPU) or the CUDA pools' unused reserved memory (kCUDA, trimmed once the
/// frees enqueued so far have completed). Live tensors are untouched.
void empty_cache(DeviceType device);

}  // namespace ht
