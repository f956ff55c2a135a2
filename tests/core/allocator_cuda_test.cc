// The CUDA allocator on a device (label gpu; skips visibly without one):
// stream-ordered blocks are reused across training steps with no cudaMalloc,
// cudaFree or device-wide wait in a steady step; allocation failures keep
// their kind (out of memory only for a lack of memory); copies and fills on a
// created stream give the values the host expects.
//
// Never run when written: the machine it was written on had no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <vector>

#include "ht/core/allocator.h"
#include "ht/core/stream.h"
#include "ht/core/tensor.h"
#include "lm_engine.h"
#include "test_util.h"

namespace ht {
namespace {

AllocatorStats cuda_stats() { return allocator_stats(DeviceType::kCUDA); }

TEST(CudaAllocator, CopiesAndFillsOnACreatedStream) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Stream stream(Device::cuda(0));
  ASSERT_NE(stream.handle(), nullptr);
  const StreamGuard guard(stream.handle());
  for (int round = 0; round < 3; ++round) {  // later rounds reuse the pool's blocks
    Tensor d = Tensor::zeros({1000}, DType::kF32, Device::cuda(0));
    EXPECT_EQ(d.to_vector<float>(), std::vector<float>(1000, 0.f));
    d.fill_(2.5f + float(round));
    const Tensor back = d.to(Device::cpu());
    EXPECT_EQ(back.to_vector<float>(), std::vector<float>(1000, 2.5f + float(round)));
    Tensor e = Tensor::empty({1000}, DType::kF32, Device::cuda(0));
    e.copy_from(d);  // device to device, on the stream
    EXPECT_EQ(e.item(999), 2.5f + float(round));
  }
}

TEST(CudaAllocator, OnlyALackOfMemoryIsOutOfMemory) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // 2^50 bytes (1 PiB) fits on no device.
  EXPECT_TRUE(test::throws_error(
      [] { Tensor::empty({std::int64_t(1) << 48}, DType::kF32, Device::cuda(0)); }, ErrorKind::kOutOfMemory,
      {"cannot allocate", "cuda:0"}));
  // A device that does not exist is not a lack of memory.
  const int missing = cuda_device_count();
  try {
    Tensor::empty({16}, DType::kF32, Device::cuda(missing));
    ADD_FAILURE() << "allocating on cuda:" << missing << " did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCuda) << e.what();
    EXPECT_NE(e.native().find("cudaError"), std::string::npos) << e.what();
  }
  // The device is still usable afterwards: no sticky error was left.
  EXPECT_EQ(Tensor::zeros({4}, DType::kF32, Device::cuda(0)).item(3), 0.f);
}

TEST(CudaAllocator, SteadyTrainingStepAllocatesAndWaitsForNothing) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  data::TokenSplits data;
  data.vocab_size = 256;
  for (int i = 0; i < 4000; ++i) data.train.push_back(std::int32_t((i * 7) % 251));
  for (int i = 0; i < 400; ++i) data.val.push_back(std::int32_t((i * 7) % 251));
  test::GPTRunOptions o = test::tiny_gpt_options(/*steps=*/10);
  o.engine.device = Device::cuda(0);
  // As the training job does: the run's work on a stream of its own.
  const Stream stream(Device::cuda(0));
  const StreamGuard guard(stream.handle());
  test::GPTEngine run(o, data);
  for (int i = 0; i < 2; ++i) run.engine.step();  // warm-up: the pool grows to the step's peak
  std::vector<std::int64_t> stream_waits;
  for (int i = 0; i < 3; ++i) {
    const AllocatorStats before = cuda_stats();
    run.engine.step();
    const AllocatorStats after = cuda_stats();
    EXPECT_EQ(after.system_allocations - before.system_allocations, 0) << "step " << i + 3;
    EXPECT_EQ(after.system_frees - before.system_frees, 0) << "step " << i + 3;
    EXPECT_EQ(after.device_synchronizations - before.device_synchronizations, 0) << "step " << i + 3;
    EXPECT_GT(after.cache_hits - before.cache_hits, 0) << "step " << i + 3;
    stream_waits.push_back(after.stream_synchronizations - before.stream_synchronizations);
  }
  // The waits that remain are the step's reads of device values on the host
  // (the loss, the gradient norm, host-side checks of token ids): the same
  // number every step.
  std::printf("# stream synchronisations per steady step: %lld %lld %lld\n", (long long)stream_waits[0],
              (long long)stream_waits[1], (long long)stream_waits[2]);
  EXPECT_EQ(stream_waits[0], stream_waits[1]);
  EXPECT_EQ(stream_waits[1], stream_waits[2]);
}

}  // namespace
}  // namespace ht
