// Several tensors between pipeline stages (nn::Model::stage_inputs): a
// declaration that is not what the stage before sends is named at the first
// transfer, with the tensor and both shapes, or both counts; the stage
// before times out waiting for its gradient. (That the examples/seq2seq
// model trains alike on every layout is seq2seq_layouts_*'s.)
#include <gtest/gtest.h>

#include <mpi.h>

#include "examples/seq2seq/seq2seq_model.h"
#include "ht/comm/device_mesh.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/train/engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

using examples::Seq2Seq;
using examples::Seq2SeqConfig;

constexpr Seq2SeqConfig kConfig{.vocab = 12, .src_len = 5, .dim = 16, .heads = 2, .enc_layers = 1, .dec_layers = 2};

// Declares the memory one position longer than the encoder's.
class LongMemory : public Seq2Seq {
 public:
  using Seq2Seq::Seq2Seq;
  std::vector<nn::StageTensor> stage_inputs(const Shape& input) const override {
    std::vector<nn::StageTensor> t = Seq2Seq::stage_inputs(input);
    t[1].shape[1] += 1;
    return t;
  }
};

// Declares one tensor where two arrive.
class OneTensor : public Seq2Seq {
 public:
  using Seq2Seq::Seq2Seq;
  std::vector<nn::StageTensor> stage_inputs(const Shape& input) const override {
    return {Seq2Seq::stage_inputs(input).front()};
  }
};

template <typename Model>
void expect_named(std::initializer_list<std::string_view> parts) {
  comm::DeviceMesh mesh(comm::make_mpi_world({.timeout = std::chrono::seconds(3)}), 1, 2);
  examples::Reversals data(kConfig);
  EngineOptions o;
  // Stage 1 holds the last decoder block: it receives the target state and the memory.
  o.layout = {.pp = 2, .dp = 1, .micro_batch = 2, .grad_accum = 2, .stage_layers = {2, 1}};
  o.steps = 1;
  Engine engine(o, [](const nn::Placement& at) { return std::make_unique<Model>(kConfig, at); }, data, &mesh);
  struct AtTheEnd {
    ~AtTheEnd() { MPI_Barrier(MPI_COMM_WORLD); }
  } barrier_after_the_engine [[maybe_unused]];
  if (mesh.coord().pp_rank == 1)
    EXPECT_TRUE(test::throws_error([&] { engine.step(); }, ErrorKind::kShapeMismatch, parts));
  else
    EXPECT_THROW(engine.step(), CommError);
}

TEST(StageTensors, AWrongShapeNamesTheTensorAndBothShapes) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  expect_named<LongMemory>({"pipeline stage 1 (chunk 0), micro-batch 0", "sends 2 tensor(s) where this stage expects 2",
                            "tensor 'memory'", "[2, 5, 16] f32 sent, [2, 6, 16] f32 expected"});
}

TEST(StageTensors, AWrongCountNamesBothCounts) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  expect_named<OneTensor>({"sends 2 tensor(s) where this stage expects 1", "its inputs: nn::Model::stage_inputs"});
}

}  // namespace
}  // namespace ht::train
