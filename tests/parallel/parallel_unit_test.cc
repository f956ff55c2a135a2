// The parallel layer's pure parts: tensor-parallel parts of a tensor and back,
// stage splits, and options refused with clear errors.
#include <gtest/gtest.h>

#include "ht/comm/device_mesh.h"
#include "ht/comm/self_communicator.h"
#include "ht/nn/gpt.h"
#include "ht/nn/tensor_parallel.h"
#include "ht/parallel/data_parallel.h"
#include "ht/parallel/pipeline.h"
#include "test_util.h"

namespace ht {
namespace {

TEST(TensorParallel, PartsAssembleToTheWholeForEverySplit) {
  std::mt19937 rng(3);
  const Tensor full = test::random_tensor({12, 6}, rng);
  for (const nn::ParamLayout base : {nn::ParamLayout{.tp_split_dim = 0}, nn::ParamLayout{.tp_split_dim = 1},
                                     nn::ParamLayout{.tp_split_dim = 0, .tp_parts = 3}}) {
    std::vector<Tensor> parts;
    for (int r = 0; r < 2; ++r) {
      nn::ParamLayout l = base;
      l.tp_rank = r;
      l.tp_size = 2;
      parts.push_back(nn::tp_part_of(full, l));
      EXPECT_EQ(parts.back().shape(), nn::tp_part_shape(full.shape(), l));
    }
    nn::ParamLayout l = base;
    l.tp_size = 2;
    EXPECT_EQ(nn::tp_assemble(parts, l).to_vector<float>(), full.to_vector<float>())
        << "split dim " << base.tp_split_dim << ", parts " << base.tp_parts;
  }
  // Packed [Q | K | V]: rank 0 holds the first half of each of the three pieces.
  nn::ParamLayout qkv{.tp_split_dim = 0, .tp_rank = 0, .tp_size = 2, .tp_parts = 3};
  const Tensor part = nn::tp_part_of(full, qkv);
  EXPECT_EQ(part[2].to_vector<float>(), full[4].to_vector<float>()) << "row 0 of K";
  qkv.tp_size = 5;
  EXPECT_TRUE(test::throws_error([&] { nn::tp_part_of(full, qkv); }, ErrorKind::kConfig,
                                 {"does not split into 3 piece(s) x 5"}));
}

TEST(PipelineStages, BlocksSplitContiguouslyFirstStagesTakeTheRest) {
  EXPECT_EQ(nn::stage_blocks(5, 0, 2), std::make_pair(0, 3));
  EXPECT_EQ(nn::stage_blocks(5, 1, 2), std::make_pair(3, 5));
  EXPECT_EQ(nn::stage_blocks(5, 3, 4), std::make_pair(4, 5));
  EXPECT_EQ(nn::stage_blocks(8, 2, 4), std::make_pair(4, 6));
}

TEST(ParallelOptions, BadValuesFailClearly) {
  EXPECT_EQ(parallel::parse_schedule("gpipe"), parallel::Schedule::kGPipe);
  EXPECT_EQ(parallel::parse_schedule("1f1b"), parallel::Schedule::k1F1B);
  EXPECT_TRUE(test::throws_error([] { parallel::parse_schedule("zb-h1"); }, ErrorKind::kConfig,
                                 {"'zb-h1'", "gpipe or 1f1b"}));
  EXPECT_TRUE(test::throws_error([] { parallel::DataParallelOptions{.zero_stage = 4}.validate(2); },
                                 ErrorKind::kConfig, {"--zero 4"}));
  EXPECT_TRUE(test::throws_error([] { parallel::DataParallelOptions{.zero_stage = 0, .shard_group = 2}.validate(4); },
                                 ErrorKind::kConfig, {"needs a ZeRO stage"}));
  EXPECT_TRUE(test::throws_error([] { parallel::DataParallelOptions{.bucket_bytes = 0}.validate(2); },
                                 ErrorKind::kConfig, {"bucket size must be positive"}));
  const nn::GPTConfig c{.vocab_size = 62, .context = 8, .n_layer = 2, .n_head = 4, .n_embd = 16};
  EXPECT_TRUE(test::throws_error([&] { c.validate_parallel(8, 1); }, ErrorKind::kConfig, {"n_head=4", "--tp 8"}));
  EXPECT_TRUE(test::throws_error([&] { c.validate_parallel(4, 1); }, ErrorKind::kConfig,
                                 {"vocab_size=62 does not split over --tp 4"}));
  EXPECT_TRUE(test::throws_error([&] { c.validate_parallel(1, 3); }, ErrorKind::kConfig,
                                 {"2 layers cannot fill 3 pipeline stages"}));
  EXPECT_NO_THROW(c.validate_parallel(2, 2));
}

// A model built with deferred storage holds no values: only ZeRO-3, given
// the initial values, may take it over; anything else is refused by name.
TEST(DataParallel, DeferredStorageNeedsZero3AndInitialValues) {
  const nn::GPTConfig c{.vocab_size = 16, .context = 8, .n_layer = 1, .n_head = 2, .n_embd = 8};
  comm::DeviceMesh mesh(comm::make_self_communicator(), 1, 1);
  nn::GPT deferred(c, Device::cpu(), nn::TensorParallel{&mesh.tp_group()}, {}, /*defer_storage=*/true);
  EXPECT_TRUE(test::throws_error([&] { parallel::DataParallel dp(deferred, mesh, {.zero_stage = 2}); },
                                 ErrorKind::kInvalidArgument, {"has no storage", "needs ZeRO-3 and its initial values"}));
  EXPECT_TRUE(test::throws_error([&] { parallel::DataParallel dp(deferred, mesh, {.zero_stage = 3}); },
                                 ErrorKind::kInvalidArgument, {"has no storage"}));
  parallel::DataParallel dp(deferred, mesh, {.zero_stage = 3},
                            [&](const nn::Parameter& p) { return deferred.initial_value(p, 7); });
  EXPECT_FALSE(dp.slots().empty());
}

}  // namespace
}  // namespace ht
