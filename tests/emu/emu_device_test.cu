// The emulated device (emu/) itself: that it runs CUDA's execution model
// faithfully (barriers, warp operations, shared memory, streams), and that
// what a GPU would leave undefined is an error naming the kernel, the block
// and the thread, never a hang. Kernels here are written to be wrong on
// purpose; each test resets the device after the failure it provokes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace emu_test {

// Kernels ----------------------------------------------------------------

__global__ void block_sum_kernel(const int* in, int* out) {
  __shared__ int partial[64];
  partial[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (int stride = int(blockDim.x) / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// The same without its barriers: a race on `partial`.
__global__ void racy_block_sum_kernel(const int* in, int* out) {
  __shared__ int partial[64];
  partial[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int stride = int(blockDim.x) / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncwarp();  // orders the lanes of one warp only
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

__global__ void early_exit_barrier_kernel(int* out) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void shuffles_kernel(int* out) {
  const int lane = int(threadIdx.x) % 32, v = 100 + int(threadIdx.x);
  const int n = int(blockDim.x);
  out[0 * n + threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 1);
  out[1 * n + threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 3);
  out[2 * n + threadIdx.x] = __shfl_up_sync(0xffffffffu, v, 2, 16);
  out[3 * n + threadIdx.x] = __shfl_sync(0xffffffffu, v, 7, 8);
  out[4 * n + threadIdx.x] = int(__ballot_sync(0xffffffffu, lane % 3 == 0));
  out[5 * n + threadIdx.x] = __any_sync(0xffffffffu, lane == 31) + 2 * __all_sync(0xffffffffu, lane < 31);
}

__global__ void shuffle_inactive_lane_kernel(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, int(threadIdx.x), 20);
}

__global__ void mask_mismatch_kernel(int* out) {
  const unsigned mask = threadIdx.x < 16 ? 0xffffffffu : 0xffff0000u;
  out[threadIdx.x] = __shfl_xor_sync(mask, int(threadIdx.x), 1);
}

__global__ void warp_deadlock_kernel(int* out) {
  if (threadIdx.x == 0) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

__global__ void fill_kernel(float* out, int n, float v) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i <= n; i += int(gridDim.x * blockDim.x))
    if (i < n || v < 0) out[i] = v;  // v < 0: one element past the end
}

__global__ void sleep_then_write_kernel(int* out) {
  __nanosleep(200 * 1000 * 1000);
  *out = 1;
}

__global__ void copy_one_kernel(const int* in, int* out) { *out = *in; }

__global__ void dynamic_shared_kernel(int* out) {
  extern __shared__ int scratch[];
  scratch[threadIdx.x] = int(threadIdx.x) * 2;
  __syncthreads();
  out[threadIdx.x] = scratch[blockDim.x - 1 - threadIdx.x];
}

// Helpers -----------------------------------------------------------------

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

template <typename T>
std::vector<T> host_copy(const T* d, std::size_t n) {
  std::vector<T> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

/// The device's failure after a synchronisation: its message, then a reset.
std::string failure_after_sync() {
  const cudaError_t e = cudaDeviceSynchronize();
  std::string what = e == cudaSuccess ? "" : cudaGetErrorString(e);
  EXPECT_EQ(e, cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), e) << "the failure is sticky";
  cudaDeviceReset();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return what;
}

// Tests ------------------------------------------------------------------

TEST(EmuDevice, BarriersAndSharedMemoryGiveTheBlockSums) {
  std::vector<int> in(4 * 64);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = int(i * 7 % 13);
  int* d_in = device_copy(in);
  int* d_out = device_copy(std::vector<int>(4, 0));
  block_sum_kernel<<<4, 64>>>(d_in, d_out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> got = host_copy(d_out, 4);
  for (int b = 0; b < 4; ++b) {
    int want = 0;
    for (int t = 0; t < 64; ++t) want += in[std::size_t(b * 64 + t)];
    EXPECT_EQ(got[std::size_t(b)], want) << "block " << b;
  }
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST(EmuDevice, ARaceShowsAsAResultThatDependsOnTheThreadOrder) {
  std::vector<int> in(64);
  for (int i = 0; i < 64; ++i) in[std::size_t(i)] = i + 1;
  int* d_in = device_copy(in);
  int* d_out = device_copy(std::vector<int>(1, 0));
  auto run = [&](bool racy, std::uint64_t seed) {
    ht::emu::set_schedule_seed(seed);
    if (racy) racy_block_sum_kernel<<<1, 64>>>(d_in, d_out);
    else block_sum_kernel<<<1, 64>>>(d_in, d_out);
    return host_copy(d_out, 1)[0];
  };
  std::vector<int> racy, correct;
  for (std::uint64_t seed : {0, 1, 2, 3, 4, 5}) {
    racy.push_back(run(true, seed));
    correct.push_back(run(false, seed));
  }
  ht::emu::set_schedule_seed(0);
  for (int c : correct) EXPECT_EQ(c, 64 * 65 / 2) << "a kernel without a race gives one answer in every order";
  bool differs = false;
  for (int r : racy) differs |= r != racy[0];
  EXPECT_TRUE(differs) << "the racy kernel gave " << racy[0] << " under every order";
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST(EmuDevice, ABarrierSomeThreadsNeverReachIsAnErrorNamingThem) {
  int* d = device_copy(std::vector<int>(32, 0));
  early_exit_barrier_kernel<<<1, 32>>>(d);
  const std::string what = failure_after_sync();
  EXPECT_NE(what.find("kernel early_exit_barrier_kernel"), std::string::npos) << what;
  EXPECT_NE(what.find("block (0,0,0)"), std::string::npos) << what;
  EXPECT_NE(what.find("__syncthreads() reached by 31 of 32 threads: thread (5,0,0) exited without reaching it"),
            std::string::npos)
      << what;
  cudaFree(d);
}

TEST(EmuDevice, WarpShufflesBallotsAndVotesFollowCuda) {
  constexpr int n = 64;
  int* d = device_copy(std::vector<int>(6 * n, -1));
  shuffles_kernel<<<1, n>>>(d);
  const std::vector<int> got = host_copy(d, 6 * n);
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l)
    if (l % 3 == 0) ballot |= 1u << l;
  for (int t = 0; t < n; ++t) {
    const int lane = t % 32, base = t - lane, v = 100 + t;
    EXPECT_EQ(got[std::size_t(t)], 100 + base + (lane ^ 1)) << t;
    EXPECT_EQ(got[std::size_t(n + t)], lane + 3 < 32 ? v + 3 : v) << t;                   // beyond the warp: own value
    EXPECT_EQ(got[std::size_t(2 * n + t)], lane % 16 >= 2 ? v - 2 : v) << t;              // width 16
    EXPECT_EQ(got[std::size_t(3 * n + t)], 100 + base + lane / 8 * 8 + 7) << t;          // width 8
    EXPECT_EQ(unsigned(got[std::size_t(4 * n + t)]), ballot) << t;
    EXPECT_EQ(got[std::size_t(5 * n + t)], 1) << t;  // any: lane 31 exists; all: not every lane < 31
  }
  cudaFree(d);
}

TEST(EmuDevice, AShuffleFromALaneOutsideTheMaskIsAnError) {
  int* d = device_copy(std::vector<int>(32, 0));
  shuffle_inactive_lane_kernel<<<1, 32>>>(d);
  const std::string what = failure_after_sync();
  EXPECT_NE(what.find("kernel shuffle_inactive_lane_kernel"), std::string::npos) << what;
  EXPECT_NE(what.find("__shfl_sync reads lane 20, which is not in the mask 0x0000ffff"), std::string::npos) << what;
  cudaFree(d);
}

TEST(EmuDevice, LanesDisagreeingOnTheMaskIsAnError) {
  int* d = device_copy(std::vector<int>(32, 0));
  mask_mismatch_kernel<<<1, 32>>>(d);
  const std::string what = failure_after_sync();
  EXPECT_NE(what.find("with mask 0xffff0000 while lane 0 of the warp waits in __shfl_xor_sync with mask 0xffffffff"),
            std::string::npos)
      << what;
  cudaFree(d);
}

TEST(EmuDevice, AWarpWaitingForAnExitedLaneIsADeadlockNotAHang) {
  int* d = device_copy(std::vector<int>(32, 0));
  warp_deadlock_kernel<<<3, 32>>>(d);
  const std::string what = failure_after_sync();
  EXPECT_NE(what.find("deadlock: waits in __shfl_xor_sync (mask 0xffffffff) for lane 0, which has exited"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("thread (1,0,0)"), std::string::npos) << what;
  cudaFree(d);
}

TEST(EmuDevice, NothingRunsAfterAFailureUntilTheDeviceIsReset) {
  int* d = device_copy(std::vector<int>(32, 0));
  warp_deadlock_kernel<<<1, 32>>>(d);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaMemset(d, 0, 4), cudaErrorLaunchFailure) << "every call returns the sticky error";
  cudaDeviceReset();
  EXPECT_EQ(cudaMemset(d, 0, 4), cudaSuccess);
  cudaFree(d);
}

TEST(EmuDevice, FreshDeviceMemoryReadsAsNaN) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 100 * sizeof(float)), cudaSuccess);
  for (float v : host_copy(d, 100)) EXPECT_TRUE(std::isnan(v));
  cudaFree(d);
}

TEST(EmuDevice, AWritePastTheEndInsideTheAlignmentIsFoundWhenFreed) {
  float* d = nullptr;
  // 4004 bytes: 16-byte alignment leaves 12 before the guard page.
  ASSERT_EQ(cudaMalloc(&d, 1001 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(d) % 16, 0u);
  fill_kernel<<<4, 256>>>(d, 1001, -1.f);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorIllegalAddress);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorIllegalAddress)).find("byte 0 past the end of a 4004-byte allocation was written"),
            std::string::npos);
  cudaDeviceReset();
}

using EmuDeviceDeathTest = ::testing::Test;

TEST(EmuDeviceDeathTest, AnAccessPastTheEndNamesTheKernelBlockAndThread) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* d = nullptr;
        cudaMalloc(&d, 1024 * sizeof(float));  // 4096 bytes: ends at the guard page
        fill_kernel<<<1, 64>>>(d, 1024, -1.f);
        cudaDeviceSynchronize();
      },
      "out-of-bounds access: address 0x[0-9a-f]+ is 0 bytes past the end of a 4096-byte allocation in kernel "
      "fill_kernel, block \\(0,0,0\\) of \\(1,1,1\\), thread \\(0,0,0\\) of \\(64,1,1\\)");
}

TEST(EmuDeviceDeathTest, AnAccessAfterFreeNamesTheKernel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* d = nullptr;
        cudaMalloc(&d, 256 * sizeof(float));
        cudaFree(d);
        fill_kernel<<<1, 32>>>(d, 256, 1.f);
        cudaDeviceSynchronize();
      },
      "use after free: address 0x[0-9a-f]+ is in a freed 1024-byte allocation in kernel fill_kernel");
}

TEST(EmuDevice, StreamsRunConcurrentlySoAMissingWaitReadsStaleData) {
  int *flag = nullptr, *seen = nullptr;
  ASSERT_EQ(cudaMalloc(&flag, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&seen, sizeof(int)), cudaSuccess);
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t written;
  ASSERT_EQ(cudaEventCreateWithFlags(&written, cudaEventDisableTiming), cudaSuccess);
  for (bool wait : {false, true}) {
    ASSERT_EQ(cudaMemset(flag, 0, sizeof(int)), cudaSuccess);
    sleep_then_write_kernel<<<1, 1, 0, a>>>(flag);  // writes 1 after 200 ms
    ASSERT_EQ(cudaEventRecord(written, a), cudaSuccess);
    if (wait) ASSERT_EQ(cudaStreamWaitEvent(b, written, 0), cudaSuccess);
    copy_one_kernel<<<1, 1, 0, b>>>(flag, seen);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(host_copy(seen, 1)[0], wait ? 1 : 0) << (wait ? "with" : "without") << " the wait";
  }
  cudaEventDestroy(written);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  cudaFree(flag);
  cudaFree(seen);
}

TEST(EmuDevice, LaunchesTheRuntimeRefusesLeaveANonStickyError) {
  int* d = device_copy(std::vector<int>(1024, 0));
  dynamic_shared_kernel<<<1, 2048>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << "2048 threads per block";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
  dynamic_shared_kernel<<<1, 256, 64 * 1024>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << "64 KiB of dynamic shared memory without the opt-in";
  ASSERT_EQ(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  dynamic_shared_kernel<<<1, 256, 64 * 1024>>>(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> got = host_copy(d, 256);
  for (int t = 0; t < 256; ++t) EXPECT_EQ(got[std::size_t(t)], (255 - t) * 2) << t;
  cudaFree(d);
}

TEST(EmuDevice, PoolsCountWhatTheyHoldAndServeRepeatsFromTheirCache) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  cudaMemPool_t pool;
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  std::uint64_t keep = ~0ULL;
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), cudaSuccess);
  auto attr = [&](cudaMemPoolAttr a) {
    std::uint64_t v = 0;
    EXPECT_EQ(cudaMemPoolGetAttribute(pool, a, &v), cudaSuccess);
    return v;
  };
  void* p = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 1000, pool, nullptr), cudaSuccess);
  EXPECT_EQ(attr(cudaMemPoolAttrUsedMemCurrent), 1000u);
  ASSERT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(attr(cudaMemPoolAttrUsedMemCurrent), 0u);
  EXPECT_EQ(attr(cudaMemPoolAttrReservedMemCurrent), 1000u) << "kept under the release threshold";
  void* q = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&q, 1000, pool, nullptr), cudaSuccess);
  EXPECT_EQ(q, p) << "served from the cache";
  EXPECT_TRUE(std::isnan(host_copy(static_cast<float*>(q), 1)[0])) << "refilled with the fresh pattern";
  ASSERT_EQ(cudaFreeAsync(q, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  EXPECT_EQ(attr(cudaMemPoolAttrReservedMemCurrent), 0u);
  ASSERT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

}  // namespace emu_test
