// Which device a rank of a job computes on: the launcher's local rank, the
// requested index and the visible devices, and the errors that say what to
// change. Pure functions: no device is needed.
#include <cstdlib>
#include <string>

#include "ht/train/job.h"
#include "test_util.h"

namespace ht::train {
namespace {

void expect_error(ErrorKind kind, const std::string& needle, Device requested, int local_rank, int count) {
  try {
    const Device d = rank_device(requested, local_rank, count);
    FAIL() << "rank_device(" << requested.str() << ", " << local_rank << ", " << count << ") gave " << d.str();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

TEST(RankDevice, TheCpuIsEveryRanks) {
  EXPECT_EQ(rank_device(Device::cpu(), 3, 0), Device::cpu());
  EXPECT_EQ(rank_device(Device::cpu(), 0, 8), Device::cpu());
}

TEST(RankDevice, CudaIndicesCountFromEachRanksFirstGpu) {
  if (!cuda_compiled()) GTEST_SKIP() << "a build without CUDA refuses every CUDA device";
  EXPECT_EQ(rank_device(Device::cuda(0), 0, 8), Device::cuda(0));
  EXPECT_EQ(rank_device(Device::cuda(0), 5, 8), Device::cuda(5));
  EXPECT_EQ(rank_device(Device::cuda(2), 3, 8), Device::cuda(5));
  EXPECT_EQ(rank_device(Device::cuda(1), 7, 8), Device::cuda(0));  // wraps around the node's devices
  EXPECT_EQ(rank_device(Device::cuda(0), 3, 2), Device::cuda(1));  // more ranks than GPUs: they share
}

TEST(RankDevice, NoVisibleDeviceSaysSo) {
  if (!cuda_compiled()) {
    expect_error(ErrorKind::kNotSupported, "no CUDA backend", Device::cuda(0), 0, 0);
    return;
  }
  expect_error(ErrorKind::kNotSupported, "no CUDA device is visible", Device::cuda(0), 0, 0);
  expect_error(ErrorKind::kConfig, "only 2 CUDA device(s) are visible", Device::cuda(2), 0, 2);
}

class LocalRankEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override { SetUp(); }
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                                          "LOCAL_RANK"};
};

TEST_F(LocalRankEnv, ReadsTheLaunchersVariable) {
  EXPECT_EQ(launcher_local_rank(), 0);
  setenv("LOCAL_RANK", "6", 1);
  EXPECT_EQ(launcher_local_rank(), 6);
  setenv("SLURM_LOCALID", "3", 1);  // ahead of LOCAL_RANK
  EXPECT_EQ(launcher_local_rank(), 3);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  EXPECT_EQ(launcher_local_rank(), 1);
}

TEST_F(LocalRankEnv, RankAndLocalSizeComeFromTheLauncherToo) {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"})
    unsetenv(v);
  EXPECT_EQ(launcher_rank(), -1);
  EXPECT_EQ(launcher_local_size(5), 5);
  setenv("SLURM_PROCID", "9", 1);
  EXPECT_EQ(launcher_rank(), 9);
  setenv("PMIX_RANK", "2", 1);  // an MPI launcher's rank ahead of Slurm's
  EXPECT_EQ(launcher_rank(), 2);
  setenv("SLURM_NTASKS_PER_NODE", "0", 1);  // not a size: ignored
  EXPECT_EQ(launcher_local_size(5), 5);
  setenv("MPI_LOCALNRANKS", "8", 1);
  EXPECT_EQ(launcher_local_size(5), 8);
  for (const char* v : {"PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"}) unsetenv(v);
}

TEST_F(LocalRankEnv, IgnoresGarbage) {
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "two", 1);
  setenv("SLURM_LOCALID", "-1", 1);
  setenv("LOCAL_RANK", "4", 1);
  EXPECT_EQ(launcher_local_rank(), 4);
}

}  // namespace
}  // namespace ht::train
