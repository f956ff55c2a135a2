// The parallel layer's pure parts: tensor-parallel parts of a tensor and back,
// stage splits, and options refused with clear errors; and what DataParallel
// refuses or takes from a model on one process (deferred storage, initial
// values, ZeRO-3 units, tied weights).
#include <gtest/gtest.h>

#include "ht/comm/device_mesh.h"
#include "ht/comm/self_communicator.h"
#include "ht/models/gpt.h"
#include "ht/nn/linear.h"
#include "ht/nn/model.h"
#include "ht/nn/tensor_parallel.h"
#include "ht/parallel/data_parallel.h"
#include "ht/parallel/tables.h"
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
  EXPECT_EQ(parallel::stage_range(5, 0, 2), std::make_pair(0, 3));
  EXPECT_EQ(parallel::stage_range(5, 1, 2), std::make_pair(3, 5));
  EXPECT_EQ(parallel::stage_range(5, 3, 4), std::make_pair(4, 5));
  EXPECT_EQ(parallel::stage_range(8, 2, 4), std::make_pair(4, 6));
}

TEST(ParallelOptions, BadValuesFailClearly) {
  EXPECT_EQ(parallel::parse_schedule("gpipe"), parallel::Schedule::kGPipe);
  EXPECT_EQ(parallel::parse_schedule("1f1b"), parallel::Schedule::k1F1B);
  EXPECT_EQ(parallel::parse_schedule("zb-h1"), parallel::Schedule::kZeroBubbleH1);
  EXPECT_TRUE(test::throws_error([] { parallel::parse_schedule("zbh1"); }, ErrorKind::kConfig,
                                 {"'zbh1'", "gpipe, 1f1b, interleaved or zb-h1"}));
  EXPECT_TRUE(test::throws_error([] { parallel::DataParallelOptions{.zero_stage = 4}.validate(2); },
                                 ErrorKind::kConfig, {"--zero 4"}));
  EXPECT_TRUE(test::throws_error([] { parallel::DataParallelOptions{.zero_stage = 0, .shard_group = 2}.validate(4); },
                                 ErrorKind::kConfig, {"needs a ZeRO stage"}));
  EXPECT_TRUE(test::throws_error([] { parallel::DataParallelOptions{.bucket_bytes = 0}.validate(2); },
                                 ErrorKind::kConfig, {"bucket size must be positive"}));
  const models::GPTConfig c{.vocab_size = 62, .context = 8, .n_layer = 2, .n_head = 4, .n_embd = 16};
  EXPECT_TRUE(test::throws_error([&] { c.validate_parallel(8, 1); }, ErrorKind::kConfig, {"n_head=4", "--tp 8"}));
  EXPECT_TRUE(test::throws_error([&] { c.validate_parallel(4, 1); }, ErrorKind::kConfig,
                                 {"vocab_size=62 does not split over --tp 4"}));
  EXPECT_TRUE(test::throws_error([&] { c.validate_parallel(1, 3); }, ErrorKind::kConfig,
                                 {"2 layers cannot fill 3 pipeline stages"}));
  EXPECT_NO_THROW(c.validate_parallel(2, 2));
}

// A model built with deferred storage holds no values: at every ZeRO stage
// the parallel layer needs the parameters' initial values, and names the
// parameter it lacks; given them, every stage takes the model over.
TEST(DataParallel, DeferredStorageNeedsInitialValuesAtEveryStage) {
  const models::GPTConfig c{.vocab_size = 16, .context = 8, .n_layer = 1, .n_head = 2, .n_embd = 8};
  comm::DeviceMesh mesh(comm::make_self_communicator(), 1, 1);
  const nn::Placement deferred_storage{.tp = nn::TensorParallel{&mesh.tp_group()}, .defer_storage = true};
  for (int stage = 0; stage <= 3; ++stage) {
    models::GPT deferred(c, deferred_storage);
    EXPECT_TRUE(test::throws_error([&] { parallel::DataParallel dp(deferred, mesh, {.zero_stage = stage}); },
                                   ErrorKind::kInvalidArgument, {"has no storage", "needs its initial values"}))
        << "ZeRO-" << stage;
  }
  for (int stage = 0; stage <= 3; ++stage) {
    models::GPT deferred(c, deferred_storage);
    parallel::DataParallel dp(deferred, mesh, {.zero_stage = stage},
                              [](const nn::Parameter& p) { return p.initial_value(7); });
    EXPECT_FALSE(dp.slots().empty()) << "ZeRO-" << stage;
  }
}

// With initial values given, every parameter starts from them, whatever
// values the model held (not only the deferred ones).
TEST(DataParallel, InitialValuesReplaceEveryParametersValues) {
  const models::GPTConfig c{.vocab_size = 16, .context = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};
  comm::DeviceMesh mesh(comm::make_self_communicator(), 1, 1);
  for (int stage = 0; stage <= 3; ++stage) {
    models::GPT gpt(c);
    gpt.init_weights(1);  // other values than the ones the layer is given
    parallel::DataParallel dp(gpt, mesh, {.zero_stage = stage},
                              [](const nn::Parameter& p) { return p.initial_value(7); });
    dp.gather_all();
    for (nn::Parameter* p : gpt.parameters())
      EXPECT_EQ(p->data().to_vector<float>(), p->initial_value(7).to_vector<float>())
          << p->name() << " at ZeRO-" << stage;
    dp.release_all();
  }
}

// A model of one's own: a Linear child "fc" and, if asked, a parameter
// "scale" held by the model itself; it may declare tied weights.
class TinyModel : public nn::Model {
 public:
  TinyModel(const nn::Placement& at, bool own_parameter, std::vector<nn::TiedWeight> ties = {})
      : Model("tiny", at), ties_(std::move(ties)) {
    fc_ = &add_module(std::make_unique<nn::Linear>("fc", 4, 4, true, at.device));
    if (own_parameter) add_parameter("scale", {4}, false, at.device, {}, nn::Init::ones());
  }
  nn::LossValue forward_loss(nn::Context&, const Tensor&, const Tensor&) override { return {}; }
  Tensor backward_loss(nn::Context&, float) override { return {}; }
  std::vector<nn::TiedWeight> tied_weights() const override { return ties_; }
  std::string describe() const override { return "Tiny 4x4"; }

 protected:
  Tensor forward_impl(nn::Context& ctx, const Tensor& x) override { return fc_->forward(ctx, x); }
  Tensor backward_impl(nn::Context& ctx, const Tensor& dy) override { return fc_->backward(ctx, dy); }

 private:
  nn::Linear* fc_;
  std::vector<nn::TiedWeight> ties_;
};

// ZeRO-3 gathers and frees parameters per child module: a parameter the
// model holds itself would never be gathered, so it is refused by name.
// The other stages take the same model.
TEST(DataParallel, Zero3RefusesAParameterOutsideTheChildrenNamingIt) {
  comm::DeviceMesh mesh(comm::make_self_communicator(), 1, 1);
  TinyModel loose({}, /*own_parameter=*/true);
  loose.init_weights(1);
  EXPECT_TRUE(test::throws_error([&] { parallel::DataParallel dp(loose, mesh, {.zero_stage = 3}); },
                                 ErrorKind::kInvalidArgument,
                                 {"ZeRO-3", "'Tiny 4x4'", "parameter 'scale'", "outside its child modules"}));
  for (int stage = 0; stage <= 2; ++stage) {
    TinyModel m({}, /*own_parameter=*/true);
    m.init_weights(1);
    parallel::DataParallel dp(m, mesh, {.zero_stage = stage});
    EXPECT_EQ(dp.slots().size(), 3u) << "ZeRO-" << stage;
  }
  TinyModel tidy({}, /*own_parameter=*/false);
  tidy.init_weights(1);
  parallel::DataParallel dp(tidy, mesh, {.zero_stage = 3});
  EXPECT_EQ(dp.slots().size(), 2u);
}

// A tied weight declared for a stage that holds no parameter of that name is
// refused, naming the model, the weight, its stages and the stage; so is a
// tie that is not one (a single stage, or one beyond the pipeline). The
// checks come before any communication, so stage 0 of a two-stage model is
// placed on a mesh of one process here.
TEST(DataParallel, ADeclaredTiedWeightMissingOnAStageIsRefused) {
  comm::DeviceMesh mesh(comm::make_self_communicator(), 1, 1);
  const nn::Placement first_of_two{.stage = {.rank = 0, .size = 2}};
  TinyModel missing(first_of_two, false, {{.name = "emb.weight", .stages = {0, 1}}});
  missing.init_weights(1);
  EXPECT_TRUE(test::throws_error([&] { parallel::DataParallel dp(missing, mesh, {}); }, ErrorKind::kInvalidArgument,
                                 {"'Tiny 4x4'", "'emb.weight'", "stages {0,1}", "stage 0 holds no parameter"}));
  TinyModel single(first_of_two, false, {{.name = "fc.weight", .stages = {0}}});
  single.init_weights(1);
  EXPECT_TRUE(test::throws_error([&] { parallel::DataParallel dp(single, mesh, {}); }, ErrorKind::kInvalidArgument,
                                 {"'fc.weight'", "two or more distinct stages"}));
  TinyModel beyond(first_of_two, false, {{.name = "fc.weight", .stages = {0, 2}}});
  beyond.init_weights(1);
  EXPECT_TRUE(test::throws_error([&] { parallel::DataParallel dp(beyond, mesh, {}); }, ErrorKind::kInvalidArgument,
                                 {"'fc.weight'", "stages {0,2}", "below the pipeline's 2"}));
}

}  // namespace
}  // namespace ht
