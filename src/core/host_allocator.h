// Private: the host side of ht::detail::allocate — plain and pinned blocks
// from the system or from the size-class cache (include/ht/core/allocator.h
// states the policy).
#pragma once

#include <cstddef>

namespace ht::detail {

/// A block of host_size_class(bytes) bytes, 64-byte aligned (pinned: page
/// aligned, page-locked; requires a CUDA device), or null if the system has
/// none left even after the cache was emptied. Throws ht::Error(kConfig) only
/// if HT_HOST_ALLOCATOR or HT_HOST_CACHE_LIMIT is malformed (read at the
/// first call).
void* host_allocate(std::size_t bytes, bool pinned);
/// Returns a block from host_allocate (of the same `bytes` and `pinned`), to
/// the cache or the system. Never throws; a failed cudaFreeHost is reported
/// once on stderr.
void host_deallocate(void* ptr, std::size_t bytes, bool pinned) noexcept;

}  // namespace ht::detail
