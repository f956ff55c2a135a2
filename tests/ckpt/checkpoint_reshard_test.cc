// Resharding: a checkpoint saved under one layout (dp, ZeRO, tp, pp, cp, the
// blocks on each stage) loads into another — step count, weights bit for
// bit, and optimizer state (the next K losses match those of the saving
// layout itself within 1e-5).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ht/comm/mpi_communicator.h"
#include "lm_engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kSavedSteps = 3;      // N: steps before the save
constexpr int kContinuedSteps = 3;  // K: steps after it

// One side of a case: the processes it runs on and how they split the model.
// The micro-batch is per data-parallel rank; both sides of a case keep the
// global batch (micro_batch x dp) and the accumulation equal, so that they
// draw the same sequences.
struct Side {
  int np = 1, tp = 1, pp = 1, zero = 0;
  int cp = 1;  // context-parallel ranks (each sequence split over them)
  std::int64_t micro_batch = 2;
  std::vector<int> stage_layers = {};  // chosen layers per stage (empty: by count)
  int virtual_stages = 1;              // model chunks per pipeline rank (interleaved 1F1B)
  int dp() const { return np / (tp * pp * cp); }
  /// The side as the engine runs it (2 micro-batches a step).
  parallel::Layout layout() const {
    return {.tp = tp,
            .pp = pp,
            .dp = dp(),
            .cp = cp,
            .zero = zero,
            .micro_batch = micro_batch,
            .grad_accum = 2,
            .schedule = virtual_stages > 1 ? parallel::Schedule::kInterleaved : parallel::Schedule::k1F1B,
            .virtual_stages = virtual_stages,
            .stage_layers = stage_layers};
  }
};

struct Case {
  std::string name;
  Side a, b;
  // Odd model: parameter counts no dp size divides (ZeRO shards pad), for
  // dp-only cases. Otherwise 4 heads and a vocabulary of 64 split over tp,
  // and 5 layers split unevenly over 2 stages.
  bool odd_model = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

test::GPTRunOptions options_for(const Case& c, const Side& s) {
  test::GPTRunOptions o;
  o.model = c.odd_model ? models::GPTConfig{.vocab_size = 61, .context = 16, .n_layer = 3, .n_head = 3, .n_embd = 30}
                        : models::GPTConfig{.vocab_size = 64, .context = 16, .n_layer = 5, .n_head = 4, .n_embd = 32};
  o.seq_len = 8;
  o.engine.layout = s.layout();
  o.engine.steps = kSavedSteps + kContinuedSteps;
  o.engine.warmup_steps = 2;
  o.engine.lr = 3e-3f;
  o.engine.eval_samples = 16;
  o.engine.bucket_bytes = 16 << 10;
  return o;
}

// Runs fn on the first s.np ranks of `world` (one process: an engine of its
// own, without a mesh), the others wait; collective over `world`. A failure
// inside fn is reported as this rank's test failure and the ranks still meet
// at the barrier.
void on_side(comm::Communicator& world, const Side& s, const std::string& name,
             const std::function<void(comm::DeviceMesh*)>& fn) {
  auto run = [&](comm::DeviceMesh* mesh) {
    try {
      fn(mesh);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << world.rank() << " on layout " << name << ": " << e.what();
    }
  };
  if (s.np == 1) {
    if (world.rank() == 0) run(nullptr);
  } else {
    std::unique_ptr<comm::Communicator> sub = world.split(world.rank() < s.np ? 0 : -1, world.rank(), name);
    if (sub) {
      comm::DeviceMesh mesh(std::move(sub), s.tp, s.pp, s.cp);
      EXPECT_EQ(mesh.shape().dp_size(), s.dp());
      run(&mesh);
      mesh.finalize(60s);
    }
  }
  world.barrier()->wait();
}

// Bit-for-bit equality of two f32 tensors; names the first differing element.
::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << ", want " << shape_str(want.shape());
  for (std::size_t i = 0; i < g.size(); ++i)
    if (std::memcmp(&g[i], &w[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << " of " << g.size() << ": got " << g[i] << ", want "
                                           << w[i];
  return ::testing::AssertionSuccess();
}

// Each case: layout A (the first a.np ranks) trains N steps and saves, then
// continues K steps; layout B (the first b.np ranks) resumes from A's
// checkpoint and takes the same K steps. The ranks outside a layout wait.
class Reshard : public ::testing::TestWithParam<Case> {};

TEST_P(Reshard, LoadsIntoAnotherLayout) {
  const Case c = GetParam();
  const int needed = std::max(c.a.np, c.b.np);
  if (test::world_size() < needed) GTEST_SKIP() << c.name << " needs " << needed << " processes";
  ASSERT_EQ(c.a.micro_batch * c.a.dp(), c.b.micro_batch * c.b.dp()) << "the case must keep the global batch";
  const data::TokenSplits data = test::pangram_text(c.odd_model ? 61 : 64);
  comm::CommOptions comm_options;
  comm_options.timeout = 120s;
  std::unique_ptr<comm::Communicator> world = comm::make_mpi_world(comm_options);
  // One directory per job size, so that the ctest entries of several sizes can run at once.
  const test::SharedTempDir ckpt(*world, fmt::format("ht_ckpt_reshard_np{}_{}", world->size(), c.name));
  const std::string& dir = ckpt.path();

  // Layout A: N steps, the weights as saved, a save, then K more steps.
  std::map<std::string, Tensor> saved_weights;
  std::vector<float> a_losses;
  on_side(*world, c.a, c.name + "_a", [&](comm::DeviceMesh* mesh) {
    test::GPTRunOptions o = options_for(c, c.a);
    o.engine.ckpt_dir = dir;
    test::GPTEngine t(o, data, mesh);
    for (int i = 0; i < kSavedSteps; ++i) t.engine.step();
    saved_weights = t.engine.full_parameters();
    EXPECT_EQ(t.engine.save_checkpoint(), "");
    EXPECT_EQ(t.engine.wait_for_checkpoint(), "");
    for (int i = 0; i < kContinuedSteps; ++i) a_losses.push_back(t.engine.step().loss);
  });

  // Layout B: resumes from A's checkpoint and takes the same K steps.
  std::map<std::string, Tensor> loaded_weights;
  std::vector<float> b_losses;
  on_side(*world, c.b, c.name + "_b", [&](comm::DeviceMesh* mesh) {
    test::GPTRunOptions o = options_for(c, c.b);
    o.engine.ckpt_dir = dir;
    o.engine.resume = true;
    test::GPTEngine t(o, data, mesh);
    EXPECT_EQ(t.engine.resumed_from(), kSavedSteps) << "layout B did not load A's checkpoint";
    EXPECT_EQ(t.engine.steps_done(), kSavedSteps);
    loaded_weights = t.engine.full_parameters();
    for (int i = 0; i < kContinuedSteps; ++i) b_losses.push_back(t.engine.step().loss);
  });

  // World rank 0 is rank 0 of both layouts: it holds both sides' results.
  if (world->rank() == 0) {
    ASSERT_EQ(loaded_weights.size(), saved_weights.size());
    ASSERT_FALSE(saved_weights.empty());
    for (const auto& [name, want] : saved_weights) {
      ASSERT_TRUE(loaded_weights.count(name)) << name << " missing after loading";
      EXPECT_TRUE(same_bits(loaded_weights.at(name), want)) << "weights of " << name << " as loaded by " << c.name;
    }
    ASSERT_EQ(b_losses.size(), a_losses.size());
    for (std::size_t i = 0; i < a_losses.size(); ++i)
      EXPECT_NEAR(b_losses[i], a_losses[i], 1e-5 * std::abs(a_losses[i]))
          << "loss of step " << kSavedSteps + int(i) + 1 << " after loading into the other layout";
  }
  world->barrier()->wait();
  world->finalize(60s);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(
    Layouts, Reshard,
    ::testing::Values(
        // ZeRO-3 over 4 ranks (parameters and optimizer state in quarters,
        // padded) into plain data parallelism over 2.
        Case{"zero3_dp4_to_dp2", {.np = 4, .zero = 3, .micro_batch = 2}, {.np = 2, .micro_batch = 4}, true},
        // Tensor-parallel halves into whole tensors.
        Case{"tp2_to_tp1", {.np = 2, .tp = 2}, {.np = 1}},
        // Two pipeline stages (3 + 2 blocks) into one.
        Case{"pp2_to_pp1", {.np = 2, .pp = 2}, {.np = 1}},
        // Stages of chosen sizes into others: blocks 1-3 move from stage 1 to 0.
        Case{"pp2_layers_1_4_to_4_1", {.np = 2, .pp = 2, .stage_layers = {1, 4}},
             {.np = 2, .pp = 2, .stage_layers = {4, 1}}},
        // Interleaved chunks (rank 0: blocks 0-1 and 3, rank 1: 2 and 4,
        // by count over 4 virtual stages) into contiguous stages (0-2, 3-4).
        Case{"pp2_interleaved_to_pp2", {.np = 2, .pp = 2, .virtual_stages = 2}, {.np = 2, .pp = 2}},
        // Every axis at once, optimizer state sharded over dp (ZeRO-1), into one process.
        Case{"zero1_dp2_tp2_pp2_to_one", {.np = 8, .tp = 2, .pp = 2, .zero = 1, .micro_batch = 2},
             {.np = 1, .micro_batch = 4}},
        // One process into tp halves, each sharded over dp (ZeRO-3).
        Case{"one_to_zero3_dp2_tp2", {.np = 1, .micro_batch = 4}, {.np = 4, .tp = 2, .zero = 3, .micro_batch = 2}},
        // Each sequence split over 2 ranks, ZeRO-3 over dp x cp, into one process.
        Case{"zero3_cp2_to_one", {.np = 2, .zero = 3, .cp = 2}, {.np = 1}}),
    case_name);

}  // namespace
}  // namespace ht::train
