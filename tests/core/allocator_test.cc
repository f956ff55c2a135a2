// The host caching allocator: size classes, reuse of a freed block of the same
// class, the bound on cached bytes, empty_cache, the system switch, concurrent
// allocation and free from several threads, unchanged byte accounting, and
// the steady state: a training step after warm-up allocates nothing new.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "ht/core/allocator.h"
#include "ht/core/memory.h"
#include "ht/core/tensor.h"
#include "lm_engine.h"
#include "test_util.h"

namespace ht {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;

// Caching on, a known bound, and an empty cache for the test's length; the
// settings found before are restored after.
class HostCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kind_ = host_allocator();
    limit_ = host_cache_limit_bytes();
    set_host_allocator(HostAllocatorKind::kCaching);
    set_host_cache_limit_bytes(256 * kMiB);
    empty_cache(DeviceType::kCPU);
  }
  void TearDown() override {
    set_host_allocator(kind_);
    set_host_cache_limit_bytes(limit_);
  }

  static AllocatorStats stats() { return allocator_stats(DeviceType::kCPU); }

 private:
  HostAllocatorKind kind_ = HostAllocatorKind::kCaching;
  std::size_t limit_ = 0;
};

// An f32 tensor of `floats` elements (4 bytes each) on the host.
Tensor floats(std::int64_t n) { return Tensor::empty({n}, DType::kF32); }

TEST(HostSizeClass, QuarterPowerOfTwoSteps) {
  EXPECT_EQ(host_size_class(0), 64u);
  EXPECT_EQ(host_size_class(1), 64u);
  EXPECT_EQ(host_size_class(64), 64u);
  EXPECT_EQ(host_size_class(65), 128u);
  EXPECT_EQ(host_size_class(256), 256u);
  EXPECT_EQ(host_size_class(257), 320u);
  EXPECT_EQ(host_size_class(1000), 1024u);
  EXPECT_EQ(host_size_class(1025), 1280u);
  EXPECT_EQ(host_size_class(3 * 1024), 3u * 1024);
  EXPECT_EQ(host_size_class(5 * kMiB + 1), 6 * kMiB);
  EXPECT_EQ(host_size_class(7 * kMiB + 1), 8 * kMiB);
}

TEST(HostSizeClass, BoundsTheWasteAndIsStable) {
  for (std::size_t n = 1; n < (std::size_t(1) << 26); n = n * 3 / 2 + 7) {
    for (std::size_t m : {n - 1, n, n + 1}) {
      if (m == 0) continue;
      const std::size_t c = host_size_class(m);
      ASSERT_GE(c, m);
      ASSERT_EQ(c % 64, 0u) << m;
      ASSERT_LT(c - m, m / 4 + 64) << m;  // under a quarter, plus under a cache line
      ASSERT_EQ(host_size_class(c), c) << m;  // a class is its own class
    }
  }
}

TEST(HostAllocatorName, ParsesBothAndRefusesOthers) {
  EXPECT_EQ(parse_host_allocator("system"), HostAllocatorKind::kSystem);
  EXPECT_EQ(parse_host_allocator("caching"), HostAllocatorKind::kCaching);
  EXPECT_EQ(host_allocator_name(HostAllocatorKind::kSystem), "system");
  EXPECT_TRUE(test::throws_error([] { parse_host_allocator("pool"); }, ErrorKind::kConfig, {"'pool'", "system"}));
}

TEST_F(HostCacheTest, ReusesAFreedBlockOfTheSameClass) {
  void* first = nullptr;
  {
    Tensor t = floats(1000);  // 4000 bytes: class 4096
    first = t.data_ptr();
  }
  const AllocatorStats before = stats();
  EXPECT_EQ(before.cached_blocks, 1);
  EXPECT_EQ(before.cached_bytes, 4096);
  Tensor u = floats(975);  // 3900 bytes: class 4096 too
  const AllocatorStats after = stats();
  EXPECT_EQ(u.data_ptr(), first);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 1);
  EXPECT_EQ(after.system_allocations - before.system_allocations, 0);
  EXPECT_EQ(after.cached_blocks, 0);
  EXPECT_EQ(after.cached_bytes, 0);
}

TEST_F(HostCacheTest, AnotherClassIsNotServedFromTheCache) {
  { Tensor t = floats(1000); }  // class 4096
  const AllocatorStats before = stats();
  Tensor u = floats(2000);  // 8000 bytes: class 8192
  const AllocatorStats after = stats();
  EXPECT_EQ(after.cache_hits - before.cache_hits, 0);
  EXPECT_EQ(after.system_allocations - before.system_allocations, 1);
  EXPECT_EQ(after.cached_blocks, 1);  // the 4096 block waits for its class
}

TEST_F(HostCacheTest, KeepsNoMoreThanItsBound) {
  set_host_cache_limit_bytes(8192);
  const AllocatorStats before = stats();
  {
    std::vector<Tensor> live;
    for (int i = 0; i < 3; ++i) live.push_back(floats(1024));  // 4096 bytes each
  }
  AllocatorStats after = stats();
  EXPECT_EQ(after.cached_bytes, 8192);
  EXPECT_EQ(after.cached_blocks, 2);
  EXPECT_EQ(after.system_frees - before.system_frees, 1);  // the third went back
  // Lowering the bound gives back what exceeds it now.
  set_host_cache_limit_bytes(4096);
  after = stats();
  EXPECT_EQ(after.cached_bytes, 4096);
  EXPECT_EQ(after.system_frees - before.system_frees, 2);
  // A block larger than the bound is never kept.
  { Tensor big = floats(4096); }  // 16 KiB
  EXPECT_EQ(stats().cached_bytes, 4096);
  EXPECT_EQ(stats().system_frees - before.system_frees, 3);
  set_host_cache_limit_bytes(0);
  EXPECT_EQ(stats().cached_bytes, 0);
}

TEST_F(HostCacheTest, EmptyCacheGivesBackEveryBlock) {
  const AllocatorStats before = stats();
  {
    std::vector<Tensor> live;
    for (std::int64_t n : {10, 100, 1000, 10000, 100000, 1000000}) live.push_back(floats(n));
  }
  EXPECT_EQ(stats().cached_blocks, 6);
  empty_cache(DeviceType::kCPU);
  const AllocatorStats after = stats();
  EXPECT_EQ(after.cached_blocks, 0);
  EXPECT_EQ(after.cached_bytes, 0);
  EXPECT_EQ(after.system_frees - before.system_frees, 6);
  EXPECT_EQ(after.system_allocations - before.system_allocations, 6);
}

TEST_F(HostCacheTest, SystemAllocatorCachesNothing) {
  { Tensor t = floats(1000); }
  set_host_allocator(HostAllocatorKind::kSystem);
  EXPECT_EQ(host_allocator(), HostAllocatorKind::kSystem);
  EXPECT_EQ(stats().cached_blocks, 0);  // switching gave the cache back
  const AllocatorStats before = stats();
  for (int i = 0; i < 3; ++i) Tensor t = floats(1000);
  const AllocatorStats after = stats();
  EXPECT_EQ(after.system_allocations - before.system_allocations, 3);
  EXPECT_EQ(after.system_frees - before.system_frees, 3);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 0);
  // A block made under one allocator may be freed under the other.
  Tensor kept = floats(1000);
  set_host_allocator(HostAllocatorKind::kCaching);
  kept = Tensor();
  EXPECT_EQ(stats().cached_blocks, 1);
}

TEST_F(HostCacheTest, AccountingCountsRequestedBytes) {
  const MemStats before = memory_stats(DeviceType::kCPU, MemCategory::kActivations);
  {
    Tensor t = Tensor::empty({250}, DType::kF32, Device::cpu(), MemCategory::kActivations);  // 1000 bytes, class 1024
    EXPECT_EQ(memory_stats(DeviceType::kCPU, MemCategory::kActivations).current_bytes - before.current_bytes, 1000);
  }
  EXPECT_EQ(memory_stats(DeviceType::kCPU, MemCategory::kActivations).current_bytes, before.current_bytes);
  EXPECT_EQ(stats().cached_bytes, 1024);  // the class size is the cache's business
}

TEST_F(HostCacheTest, ManyThreadsAllocateAndFreeEachOthersBlocks) {
  constexpr int kThreads = 4, kRounds = 3000;
  const AllocatorStats before = stats();
  const std::int64_t live_before = memory_stats_total(DeviceType::kCPU).current_bytes;
  // Each thread allocates blocks of varied classes, writes its pattern,
  // checks the pattern of blocks another thread handed over, and frees those:
  // blocks change threads between allocation and free, and an overlap of two
  // live blocks would show as a wrong pattern.
  std::mutex mu;
  std::vector<std::pair<Tensor, std::int32_t>> exchange;
  std::atomic<int> wrong{0};
  auto work = [&](int id) {
    std::uint32_t seed = 12345u + std::uint32_t(id);
    for (int r = 0; r < kRounds; ++r) {
      seed = seed * 1664525u + 1013904223u;
      const std::int64_t n = 1 + std::int64_t(seed >> 8) % 5000;
      Tensor t = Tensor::empty({n}, DType::kI32);
      const std::int32_t mark = id * kRounds + r;
      std::int32_t* p = t.data<std::int32_t>();
      for (std::int64_t i = 0; i < n; ++i) p[i] = mark;
      std::pair<Tensor, std::int32_t> other;
      {
        std::lock_guard lock(mu);
        exchange.emplace_back(std::move(t), mark);
        if (exchange.size() > 8) {
          other = std::move(exchange.front());
          exchange.erase(exchange.begin());
        }
      }
      if (other.first.defined()) {
        const std::int32_t* q = other.first.data<std::int32_t>();
        for (std::int64_t i = 0; i < other.first.numel(); ++i)
          if (q[i] != other.second) {
            wrong.fetch_add(1);
            break;
          }
      }  // `other` is freed here, often on another thread than its own
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(work, i);
  for (auto& t : threads) t.join();
  exchange.clear();
  EXPECT_EQ(wrong.load(), 0);
  const AllocatorStats after = stats();
  EXPECT_EQ(memory_stats_total(DeviceType::kCPU).current_bytes, live_before);
  // Every block the system gave is live, cached or given back: none leaked.
  EXPECT_EQ((after.system_allocations - before.system_allocations) - (after.system_frees - before.system_frees),
            after.cached_blocks - before.cached_blocks);
  EXPECT_GT(after.cache_hits - before.cache_hits, kThreads * kRounds / 2);
}

data::TokenSplits pattern_text() {
  data::TokenSplits s;
  s.vocab_size = 256;
  const std::string phrase = "the quick brown fox jumps over the lazy dog. ";
  for (int i = 0; i < 200; ++i)
    for (char c : phrase) s.train.push_back(std::int32_t(c));
  for (int i = 0; i < 10; ++i)
    for (char c : phrase) s.val.push_back(std::int32_t(c));
  return s;
}

// The point of the cache: after a warm-up, a training step's blocks all come
// from the blocks the previous step freed.
TEST_F(HostCacheTest, SteadyTrainingStepMakesNoSystemAllocation) {
  const data::TokenSplits data = pattern_text();
  const test::GPTRunOptions o = test::tiny_gpt_options(/*steps=*/10);
  test::GPTEngine run(o, data);
  for (int i = 0; i < 2; ++i) run.engine.step();  // warm-up: optimizer state, first activations
  for (int i = 0; i < 3; ++i) {
    const AllocatorStats before = stats();
    const std::int64_t live_before = memory_stats_total(DeviceType::kCPU).current_bytes;
    run.engine.step();
    const AllocatorStats after = stats();
    EXPECT_EQ(after.system_allocations - before.system_allocations, 0) << "step " << i + 3;
    EXPECT_EQ(after.system_frees - before.system_frees, 0) << "step " << i + 3;
    EXPECT_GT(after.cache_hits - before.cache_hits, 50) << "step " << i + 3;
    EXPECT_EQ(memory_stats_total(DeviceType::kCPU).current_bytes, live_before) << "step " << i + 3;
  }
}

}  // namespace
}  // namespace ht
