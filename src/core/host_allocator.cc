// The host caching allocator (plain and pinned blocks on size-class free
// lists, with a bound on the bytes kept), the host allocator switch, and the
// public allocator API of include/ht/core/allocator.h.
//
// Why: glibc serves blocks above its mmap threshold (128 KiB, raised
// dynamically up to 32 MiB) with fresh mappings and unmaps them on free, so
// each step's activations were faulted in again page by page — about 6% of a
// CPU training step in a profile of the small GPT. Reusing the step's own
// blocks removes those faults; docs/benchmarks.md has the step times.
#include "core/host_allocator.h"

#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ht/config.h"
#include "ht/core/allocator.h"
#include "ht/core/error.h"
#if HT_HAVE_CUDA
#include "core/cuda_allocator.h"
#endif

namespace ht {
namespace {

constexpr std::size_t kHostAlignment = 64;  // one cache line; AVX-512 loads

// --- Environment (read once, at the first allocation) --------------------------

// HT_HOST_ALLOCATOR: "system" or "caching" (default caching).
HostAllocatorKind kind_from_env() {
  const char* v = std::getenv("HT_HOST_ALLOCATOR");
  if (!v || !*v) return HostAllocatorKind::kCaching;
  try {
    return parse_host_allocator(v);
  } catch (const Error&) {
    throw Error(ErrorKind::kConfig,
                fmt::format("HT_HOST_ALLOCATOR='{}' is neither system nor caching; unset it for the default (caching)", v));
  }
}

// HT_HOST_CACHE_LIMIT: a byte count with an optional K, M or G suffix
// (default kDefaultHostCacheLimitBytes).
std::size_t limit_from_env() {
  const char* v = std::getenv("HT_HOST_CACHE_LIMIT");
  if (!v || !*v) return kDefaultHostCacheLimitBytes;
  const std::string s = v;
  std::size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  int shift = -1;
  if (digits == s.size()) shift = 0;
  else if (digits + 1 == s.size()) {
    switch (s.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: break;
    }
  }
  HT_CHECK(digits > 0 && digits <= 15 && shift >= 0, ErrorKind::kConfig,
           "HT_HOST_CACHE_LIMIT='{}' is not a byte count: write e.g. 4294967296, 4096M or 4G (0 caches nothing)", s);
  return std::size_t(std::stoull(s.substr(0, digits))) << shift;
}

// --- The cache ---------------------------------------------------------------------

struct Block {
  void* ptr = nullptr;
  void* fence = nullptr;  // pinned blocks: reusable once this event completed
};

// The free lists are keyed by class size with bit 0 set for pinned blocks (a
// class is a multiple of 64, so the bit is free). One mutex guards them: an
// allocation or free holds it for a hash look-up and a vector push or pop,
// well under a microsecond, against a step's few thousand allocations.
class HostCache {
 public:
  HostCache() : kind_(kind_from_env()), limit_(limit_from_env()) {}

  HostAllocatorKind kind() const { return kind_.load(std::memory_order_relaxed); }
  void set_kind(HostAllocatorKind k) { kind_.store(k); }
  std::size_t limit() const { return limit_.load(std::memory_order_relaxed); }

  /// A cached block of class `cls` that may be reused now, or null.
  void* take(std::size_t cls, bool pinned) {
    Block found;
    {
      std::lock_guard lock(mu_);
      auto it = free_.find(key(cls, pinned));
      if (it == free_.end()) return nullptr;
      std::vector<Block>& list = it->second;
      // Newest first: its pages are the likeliest still in the CPU's caches.
      for (std::size_t i = list.size(); i-- > 0;) {
        if (!ready(list[i])) continue;
        found = list[i];
        list.erase(list.begin() + std::ptrdiff_t(i));
        cached_bytes_ -= std::int64_t(cls);
        cached_blocks_ -= 1;
        break;
      }
    }
    if (!found.ptr) return nullptr;
    release_fence(found.fence, false);
    cache_hits_.fetch_add(1, std::memory_order_relaxed);
    return found.ptr;
  }

  /// Keeps `block` of class `cls` if the bound allows; false: the caller
  /// gives it back to the system.
  bool put(std::size_t cls, bool pinned, Block block) {
    std::lock_guard lock(mu_);
    if (std::size_t(cached_bytes_.load()) + cls > limit()) return false;
    free_[key(cls, pinned)].push_back(block);
    cached_bytes_ += std::int64_t(cls);
    cached_blocks_ += 1;
    return true;
  }

  /// Sets the bound and gives back blocks until the cache is within it.
  void set_limit(std::size_t bytes) {
    std::vector<std::pair<std::size_t, Block>> out;
    {
      std::lock_guard lock(mu_);
      limit_.store(bytes);
      for (auto& [k, list] : free_) {
        // Oldest first: the block reused last is the least likely to be wanted.
        std::size_t n = 0;
        while (n < list.size() && std::size_t(cached_bytes_.load()) > bytes) {
          out.emplace_back(k, list[n]);
          cached_bytes_ -= std::int64_t(k & ~std::size_t(1));
          cached_blocks_ -= 1;
          ++n;
        }
        list.erase(list.begin(), list.begin() + std::ptrdiff_t(n));
      }
    }
    give_back(out);
  }

  /// Gives every cached block back to the system.
  void drain() {
    std::vector<std::pair<std::size_t, Block>> out;
    {
      std::lock_guard lock(mu_);
      for (auto& [k, list] : free_)
        for (const Block& b : list) out.emplace_back(k, b);
      free_.clear();
      cached_bytes_ = 0;
      cached_blocks_ = 0;
    }
    give_back(out);
  }

  void* system_allocate(std::size_t cls, bool pinned) {
    void* p = nullptr;
    if (pinned) {
#if HT_HAVE_CUDA
      if (cuda::pinned_allocate(&p, cls) != cudaSuccess) p = nullptr;
#endif
    } else {
      p = std::aligned_alloc(kHostAlignment, cls);
    }
    if (p) system_allocations_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }

  void system_free(void* p, bool pinned) noexcept {
    if (pinned) {
#if HT_HAVE_CUDA
      cuda::pinned_free(p);
#endif
    } else {
      std::free(p);
    }
    system_frees_.fetch_add(1, std::memory_order_relaxed);
  }

  AllocatorStats stats() const noexcept {
    AllocatorStats s;
    s.system_allocations = system_allocations_.load();
    s.system_frees = system_frees_.load();
    s.cache_hits = cache_hits_.load();
    s.cached_bytes = cached_bytes_.load();
    s.cached_blocks = cached_blocks_.load();
    return s;
  }

 private:
  static std::size_t key(std::size_t cls, bool pinned) { return cls | (pinned ? 1 : 0); }

  static bool ready(const Block& b) noexcept {
#if HT_HAVE_CUDA
    return cuda::fence_done(b.fence);
#else
    (void)b;
    return true;
#endif
  }

  // A fence still pending when its block leaves the cache for the system is
  // waited for first: the copy it guards may still read the block.
  static void release_fence(void* fence, bool wait) noexcept {
#if HT_HAVE_CUDA
    if (fence && wait && !cuda::fence_done(fence)) {
      cudaEventSynchronize(static_cast<cudaEvent_t>(fence));
      cuda::count_stream_synchronization();
    }
    cuda::destroy_fence(fence);
#else
    (void)fence;
    (void)wait;
#endif
  }

  void give_back(const std::vector<std::pair<std::size_t, Block>>& blocks) noexcept {
    for (const auto& [k, b] : blocks) {
      release_fence(b.fence, true);
      system_free(b.ptr, (k & 1) != 0);
    }
  }

  std::atomic<HostAllocatorKind> kind_;
  std::atomic<std::size_t> limit_;
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<Block>> free_;
  // Written under mu_, atomic so that stats() reads them without it.
  std::atomic<std::int64_t> cached_bytes_{0};
  std::atomic<std::int64_t> cached_blocks_{0};
  std::atomic<std::int64_t> system_allocations_{0};
  std::atomic<std::int64_t> system_frees_{0};
  std::atomic<std::int64_t> cache_hits_{0};
};

// Built at the first use, which reads the environment (and throws
// ht::Error(kConfig) if it is malformed; the next use tries again). Never
// destroyed: tensors in static storage may be freed after main returns.
HostCache& cache() {
  static HostCache* const instance = new HostCache();
  return *instance;
}

}  // namespace

std::string_view host_allocator_name(HostAllocatorKind kind) {
  return kind == HostAllocatorKind::kSystem ? "system" : "caching";
}

HostAllocatorKind parse_host_allocator(std::string_view name) {
  if (name == "system") return HostAllocatorKind::kSystem;
  if (name == "caching") return HostAllocatorKind::kCaching;
  throw Error(ErrorKind::kConfig, fmt::format("unknown host allocator '{}': choose system or caching", name));
}

std::size_t host_size_class(std::size_t bytes) {
  const std::size_t n = bytes == 0 ? 1 : bytes;
  const int k = std::bit_width(n) - 1;  // 2^k <= n < 2^(k+1)
  const std::size_t step = k - 2 > 6 ? std::size_t(1) << (k - 2) : kHostAlignment;
  const std::size_t rounded = (n + step - 1) / step * step;
  return rounded < n ? n : rounded;  // a request within a step of SIZE_MAX: let the system refuse it
}

AllocatorStats allocator_stats(DeviceType device) noexcept {
  if (device == DeviceType::kCUDA) {
#if HT_HAVE_CUDA
    return cuda::device_allocator_stats();
#else
    return {};
#endif
  }
  try {
    return cache().stats();
  } catch (...) {
    return {};  // a malformed environment: nothing was ever allocated
  }
}

HostAllocatorKind host_allocator() { return cache().kind(); }

void set_host_allocator(HostAllocatorKind kind) {
  cache().set_kind(kind);
  if (kind == HostAllocatorKind::kSystem) cache().drain();
}

std::size_t host_cache_limit_bytes() { return cache().limit(); }

void set_host_cache_limit_bytes(std::size_t bytes) { cache().set_limit(bytes); }

void empty_cache(DeviceType device) {
  if (device == DeviceType::kCPU) {
    cache().drain();
    return;
  }
#if HT_HAVE_CUDA
  cuda::empty_device_cache();
#endif
}

namespace detail {

void* host_allocate(std::size_t bytes, bool pinned) {
  HostCache& c = cache();
  const std::size_t cls = host_size_class(bytes);
  if (c.kind() == HostAllocatorKind::kCaching)
    if (void* p = c.take(cls, pinned)) return p;
  if (void* p = c.system_allocate(cls, pinned)) return p;
  // Out of memory: what the cache holds may be enough once given back.
  c.drain();
  return c.system_allocate(cls, pinned);
}

void host_deallocate(void* ptr, std::size_t bytes, bool pinned) noexcept {
  HostCache& c = cache();  // built by the host_allocate that made `ptr`
  const std::size_t cls = host_size_class(bytes);
  if (c.kind() == HostAllocatorKind::kCaching && cls <= c.limit()) {
    Block block{ptr, nullptr};
#if HT_HAVE_CUDA
    if (pinned) block.fence = cuda::record_fence();
    const bool fenced = !pinned || block.fence;
#else
    const bool fenced = true;
#endif
    if (fenced) {
      if (c.put(cls, pinned, block)) return;
#if HT_HAVE_CUDA
      cuda::destroy_fence(block.fence);
#endif
    }
  }
  c.system_free(ptr, pinned);
}

}  // namespace detail
}  // namespace ht
