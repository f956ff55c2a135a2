// The emulated device's memory: allocations with a guard page on each side
// (an access past either end faults, and the fault names the kernel),
// filled with a NaN pattern when fresh (a read of memory nobody wrote gives
// NaN, not a plausible zero), quarantined when freed (a use after free
// faults); copies and sets ordered on streams; pinned host memory; the
// stream-ordered pools.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <iterator>
#include <string>
#include <vector>

#include "internal.h"

namespace ht::emu {
namespace {

// cudaMalloc promises 256-byte alignment; the emulated device gives 16 (what
// any vector type needs), so that an allocation ends at most 15 bytes before
// its guard page: an overrun past those faults at once, and one within them
// is found by the canary when it changed a byte.
constexpr std::size_t kAlignment = 16;
constexpr unsigned char kFresh = 0xFF;       // all-ones: NaN in f32, f16 and bf16; -1 in integers
constexpr unsigned char kCanary = 0xA5;      // the bytes between an allocation's end and its guard page
constexpr std::size_t kQuarantineMaps = 4096;

std::size_t page_size() {
  static const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  return page;
}

struct Mapping {
  char* base = nullptr;     // the mapping, guard pages included
  std::size_t span = 0;
  char* user = nullptr;     // what the caller got
  std::size_t bytes = 0;
  bool freed = false;
};

std::mutex g_mutex;
// The registry's containers are never destroyed: a stream's thread may still
// run a queued free while the process exits and static objects go away.
// (std::mutex's destructor does nothing, so the mutexes may stay plain.)
std::map<std::uintptr_t, Mapping>& g_maps = *new std::map<std::uintptr_t, Mapping>;  // by base: live and quarantined
std::deque<std::uintptr_t>& g_quarantine = *new std::deque<std::uintptr_t>;
std::map<std::uintptr_t, std::size_t>& g_pinned = *new std::map<std::uintptr_t, std::size_t>;  // cudaMallocHost's blocks
std::atomic<std::size_t> g_in_use{0};

// Which mapping holds `p`, guard pages included; nullptr if none. g_mutex held.
const Mapping* mapping_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = g_maps.upper_bound(a);
  if (it == g_maps.begin()) return nullptr;
  --it;
  return a < it->first + it->second.span ? &it->second : nullptr;
}

void on_fault(int sig, siginfo_t* info, void*) {
  const void* addr = info->si_addr;
  std::string what;
  if (g_mutex.try_lock()) {
    if (const Mapping* m = mapping_of(addr)) {
      const char* a = static_cast<const char*>(addr);
      char buf[256];
      if (m->freed)
        std::snprintf(buf, sizeof buf, "use after free: address %p is in a freed %zu-byte allocation", addr, m->bytes);
      else if (a < m->user)
        std::snprintf(buf, sizeof buf, "out-of-bounds access: address %p is %zu bytes before a %zu-byte allocation",
                      addr, std::size_t(m->user - a), m->bytes);
      else
        std::snprintf(buf, sizeof buf, "out-of-bounds access: address %p is %zu bytes past the end of a %zu-byte allocation",
                      addr, std::size_t(a - (m->user + m->bytes)), m->bytes);
      what = buf;
    }
    g_mutex.unlock();
  }
  if (!what.empty()) {
    const std::string kernel = running_kernel_description();
    std::fprintf(stderr, "ht-emu: %s%s%s\n", what.c_str(), kernel.empty() ? " (on the host)" : " in ",
                 kernel.c_str());
    std::fflush(stderr);
  }
  // Die of the signal, as the process would have without this handler.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

// Frees the quarantine's oldest mappings past its size. g_mutex held.
void trim_quarantine() {
  while (g_quarantine.size() > kQuarantineMaps) {
    auto it = g_maps.find(g_quarantine.front());
    g_quarantine.pop_front();
    if (it == g_maps.end()) continue;
    munmap(it->second.base, it->second.span);
    g_maps.erase(it);
  }
}

bool is_host_pageable(const void* p) {
  std::lock_guard lock(g_mutex);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (auto it = g_pinned.upper_bound(a); it != g_pinned.begin() && a < std::prev(it)->first + std::prev(it)->second)
    return false;
  return mapping_of(p) == nullptr;
}

}  // namespace

void* device_allocate(std::size_t bytes) {
  install_fault_handler();
  const std::size_t page = page_size();
  const std::size_t data = std::max<std::size_t>((bytes + kAlignment - 1) / kAlignment * kAlignment, kAlignment);
  const std::size_t data_pages = (data + page - 1) / page * page;
  const std::size_t span = data_pages + 2 * page;
  if (g_in_use.load() + bytes > kDeviceMemoryBytes) return nullptr;
  void* base = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  char* b = static_cast<char*>(base);
  mprotect(b, page, PROT_NONE);
  mprotect(b + page + data_pages, page, PROT_NONE);
  // As close to the guard page after it as the alignment allows.
  char* end = b + page + data_pages;
  char* user = end - data;
  std::memset(user, kFresh, bytes);
  std::memset(user + bytes, kCanary, std::size_t(end - (user + bytes)));
  std::lock_guard lock(g_mutex);
  g_maps[reinterpret_cast<std::uintptr_t>(b)] = Mapping{b, span, user, bytes, false};
  g_in_use += bytes;
  return user;
}

namespace {

// The bytes between an allocation's end and its guard page still hold the
// canary; else the device fails, naming the allocation. g_mutex held.
void check_canary(Mapping& m) {
  const char* end = m.base + m.span - page_size();
  for (const char* c = m.user + m.bytes; c < end; ++c)
    if (static_cast<unsigned char>(*c) != kCanary) {
      fail_device(cudaErrorIllegalAddress, "out-of-bounds write: byte " + std::to_string(c - (m.user + m.bytes)) +
                                               " past the end of a " + std::to_string(m.bytes) +
                                               "-byte allocation was written (found when it was freed)");
      std::memset(m.user + m.bytes, kCanary, std::size_t(end - (m.user + m.bytes)));  // reported once
      return;
    }
}

}  // namespace

void check_past_end(void* ptr) {
  std::lock_guard lock(g_mutex);
  if (Mapping* m = const_cast<Mapping*>(mapping_of(ptr)); m && !m->freed && m->user == ptr) check_canary(*m);
}

bool device_free(void* ptr) {
  std::lock_guard lock(g_mutex);
  Mapping* m = const_cast<Mapping*>(mapping_of(ptr));
  if (!m || m->freed || m->user != ptr) return false;
  check_canary(*m);
  madvise(m->base, m->span, MADV_DONTNEED);
  mprotect(m->base, m->span, PROT_NONE);
  m->freed = true;
  g_in_use -= m->bytes;
  g_quarantine.push_back(reinterpret_cast<std::uintptr_t>(m->base));
  trim_quarantine();
  return true;
}

std::size_t device_bytes_in_use() { return g_in_use.load(); }

void refill_fresh(void* ptr, std::size_t bytes) { std::memset(ptr, kFresh, bytes); }

}  // namespace ht::emu

// ---------------------------------------------------------------------------
// The pools.

struct CUmemPoolHandle_st {
  std::mutex m;
  std::uint64_t release_threshold = 0;
  std::uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  std::multimap<std::size_t, void*> cached;  // freed blocks kept for reuse, by size
  std::map<void*, std::size_t> live;

  void* allocate(std::size_t bytes) {
    std::lock_guard lock(m);
    void* p = nullptr;
    if (auto it = cached.find(bytes); it != cached.end()) {
      p = it->second;
      cached.erase(it);
      ht::emu::refill_fresh(p, bytes);
    } else {
      p = ht::emu::device_allocate(bytes);
      if (!p) return nullptr;
      reserved += bytes;
      reserved_high = std::max(reserved_high, reserved);
    }
    live[p] = bytes;
    used += bytes;
    used_high = std::max(used_high, used);
    return p;
  }

  void release(void* p) {
    std::lock_guard lock(m);
    auto it = live.find(p);
    if (it == live.end()) return;
    ht::emu::check_past_end(p);  // a pool's block is checked at each free, not only when it is returned
    used -= it->second;
    cached.emplace(it->second, p);
    live.erase(it);
    trim(release_threshold);
  }

  void trim(std::uint64_t keep) {
    while (reserved > keep && !cached.empty()) {
      auto it = cached.begin();
      reserved -= it->first;
      ht::emu::device_free(it->second);
      cached.erase(it);
    }
  }
};

namespace ht::emu {
namespace {

std::mutex g_pools_mutex;
std::map<void*, CUmemPoolHandle_st*>& g_pool_of = *new std::map<void*, CUmemPoolHandle_st*>;  // never destroyed, as g_maps

CUmemPoolHandle_st* default_pool() {
  static auto* pool = new CUmemPoolHandle_st;  // release threshold 0, as the runtime's default pool
  return pool;
}

}  // namespace
}  // namespace ht::emu

using namespace ht::emu;

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  if (!ptr) return set_last_error(cudaErrorInvalidValue);
  if (sticky_error() != cudaSuccess) return result(cudaSuccess);
  *ptr = bytes == 0 ? nullptr : device_allocate(bytes);
  return bytes != 0 && !*ptr ? set_last_error(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  drain_all();  // cudaFree synchronises the device
  if (!device_free(ptr)) return set_last_error(cudaErrorInvalidValue);
  return result(cudaSuccess);
}

cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  if (!ptr) return set_last_error(cudaErrorInvalidValue);
  *ptr = std::aligned_alloc(4096, std::max<std::size_t>((bytes + 4095) / 4096 * 4096, 4096));
  if (!*ptr) return set_last_error(cudaErrorMemoryAllocation);
  std::lock_guard lock(g_mutex);
  g_pinned[reinterpret_cast<std::uintptr_t>(*ptr)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  drain_all();
  {
    std::lock_guard lock(g_mutex);
    if (!g_pinned.erase(reinterpret_cast<std::uintptr_t>(ptr))) return set_last_error(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return set_last_error(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return result(cudaSuccess);
  if (!dst || !src) return set_last_error(cudaErrorInvalidValue);
  // As the runtime does with pageable host memory: the source is taken at
  // the call (the caller may reuse it at once), and a copy into it returns
  // when it has landed.
  if (is_host_pageable(src)) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    enqueue(s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  } else {
    enqueue(s, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  }
  if (is_host_pageable(dst)) drain(s);
  return result(cudaSuccess);
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  drain(resolve(nullptr));
  return result(cudaSuccess);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return set_last_error(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return result(cudaSuccess);
  if (!ptr) return set_last_error(cudaErrorInvalidValue);
  enqueue(s, [ptr, value, bytes] { std::memset(ptr, value, bytes); });
  return result(cudaSuccess);
}

cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(ptr, value, bytes, nullptr);
  if (e != cudaSuccess) return e;
  drain(resolve(nullptr));
  return result(cudaSuccess);
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  if (!free || !total) return set_last_error(cudaErrorInvalidValue);
  *total = kDeviceMemoryBytes;
  *free = kDeviceMemoryBytes - device_bytes_in_use();
  return cudaSuccess;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (!pool || !props || props->allocType != cudaMemAllocationTypePinned ||
      props->location.type != cudaMemLocationTypeDevice || props->location.id < 0 ||
      props->location.id >= device_count())
    return set_last_error(cudaErrorInvalidValue);
  *pool = new CUmemPoolHandle_st;
  return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  if (!pool) return set_last_error(cudaErrorInvalidValue);
  drain_all();
  {
    std::lock_guard lock(pool->m);
    pool->trim(0);
  }
  {
    std::lock_guard lock(g_pools_mutex);
    for (auto it = g_pool_of.begin(); it != g_pool_of.end();) it = it->second == pool ? g_pool_of.erase(it) : ++it;
  }
  delete pool;  // live allocations stay mapped, as the runtime frees them only at destruction of the context
  return cudaSuccess;
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, std::size_t bytes, cudaMemPool_t pool, cudaStream_t stream) {
  if (!ptr || !pool) return set_last_error(cudaErrorInvalidValue);
  if (!resolve(stream)) return set_last_error(cudaErrorInvalidResourceHandle);
  if (sticky_error() != cudaSuccess) return result(cudaSuccess);
  if (bytes == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  *ptr = pool->allocate(bytes);
  if (!*ptr) return set_last_error(cudaErrorMemoryAllocation);
  std::lock_guard lock(g_pools_mutex);
  g_pool_of[*ptr] = pool;
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t stream) {
  return cudaMallocFromPoolAsync(ptr, bytes, default_pool(), stream);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (!ptr) return cudaSuccess;
  CUstream_st* s = resolve(stream);
  if (!s) return set_last_error(cudaErrorInvalidResourceHandle);
  CUmemPoolHandle_st* pool = nullptr;
  {
    std::lock_guard lock(g_pools_mutex);
    auto it = g_pool_of.find(ptr);
    if (it == g_pool_of.end()) return set_last_error(cudaErrorInvalidValue);
    pool = it->second;
    g_pool_of.erase(it);
  }
  enqueue(s, [pool, ptr] { pool->release(ptr); });
  return result(cudaSuccess);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (!pool || !value) return set_last_error(cudaErrorInvalidValue);
  std::lock_guard lock(pool->m);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: pool->release_threshold = *static_cast<std::uint64_t*>(value); break;
    case cudaMemPoolAttrReservedMemHigh: pool->reserved_high = pool->reserved; break;
    case cudaMemPoolAttrUsedMemHigh: pool->used_high = pool->used; break;
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies: break;
    default: return set_last_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (!pool || !value) return set_last_error(cudaErrorInvalidValue);
  std::lock_guard lock(pool->m);
  auto* out = static_cast<std::uint64_t*>(value);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: *out = pool->release_threshold; break;
    case cudaMemPoolAttrReservedMemCurrent: *out = pool->reserved; break;
    case cudaMemPoolAttrReservedMemHigh: *out = pool->reserved_high; break;
    case cudaMemPoolAttrUsedMemCurrent: *out = pool->used; break;
    case cudaMemPoolAttrUsedMemHigh: *out = pool->used_high; break;
    default: return set_last_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, std::size_t min_bytes_to_keep) {
  if (!pool) return set_last_error(cudaErrorInvalidValue);
  drain_all();
  std::lock_guard lock(pool->m);
  pool->trim(min_bytes_to_keep);
  return cudaSuccess;
}
