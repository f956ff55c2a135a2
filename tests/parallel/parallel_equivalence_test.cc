// Every parallel layout trains like one process: 20 AdamW steps of a small
// GPT from the same initial weights give the same losses, gradient norms and
// final full weights as a single process on the whole batch (fp32, within
// 1e-5 relative). Each ctest entry runs the layouts of its process count;
// the others skip. Layouts that cannot split the model fail at start-up with
// a clear error on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <mpi.h>

#include "ht/comm/mpi_communicator.h"
#include "gpt_engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

struct Layout {
  std::string name;
  int np, tp, pp, zero;
  int shard_group = 0;
  parallel::Schedule schedule = parallel::Schedule::k1F1B;
  int grad_accum = 1;
  bool odd_model = false;  // counts divisible by nothing (dp-only layouts)
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) { return info.param.name; }

test::GPTRunOptions options_for(const Layout& l) {
  test::GPTRunOptions o;
  // Odd model: parameter counts that no dp size divides (flat groups pad).
  // Otherwise heads and vocabulary split over tp 4, and 5 layers split
  // unevenly over 2 and 4 stages.
  o.model = l.odd_model ? models::GPTConfig{.vocab_size = 61, .context = 16, .n_layer = 3, .n_head = 3, .n_embd = 30}
                        : models::GPTConfig{.vocab_size = 64, .context = 16, .n_layer = 5, .n_head = 4, .n_embd = 32};
  o.seq_len = 8;
  o.engine.micro_batch = 2;
  o.engine.grad_accum = l.grad_accum;
  o.engine.steps = 20;
  o.engine.warmup_steps = 3;
  o.engine.lr = 1e-3f;
  o.engine.min_lr = 1e-4f;
  o.engine.grad_clip = 1.f;
  o.engine.eval_batches = 2;
  o.engine.data_parallel = {.zero_stage = l.zero, .shard_group = l.shard_group, .bucket_bytes = 16 << 10};
  o.engine.schedule = l.schedule;
  return o;
}

struct RunResult {
  std::vector<float> losses, norms;
  float val = 0;
  std::map<std::string, Tensor> weights;
};

RunResult train(Engine& t, int steps) {
  RunResult r;
  for (int i = 0; i < steps; ++i) {
    const StepStats s = t.step();
    r.losses.push_back(s.loss);
    r.norms.push_back(s.grad_norm);
  }
  r.val = t.evaluate();
  r.weights = t.full_parameters();
  return r;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Distance {
  double diff2 = 0, norm2 = 0;
  double relative() const { return std::sqrt(diff2) / std::max(std::sqrt(norm2), 1e-30); }
};

// ||got - want|| and ||want|| over a tensor. The key part [C, 2C) of an
// attention bias is left out: softmax is invariant to it, so its gradient is
// zero in exact arithmetic and AdamW turns the rounding noise of any two
// summation orders into full-size steps (PyTorch behaves the same).
Distance distance(const Tensor& got, const Tensor& want, const std::string& name, std::int64_t n_embd) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  EXPECT_EQ(g.size(), w.size()) << name;
  const bool key_bias = ends_with(name, "attn.c_attn.bias");
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    if (key_bias && std::int64_t(i) >= n_embd && std::int64_t(i) < 2 * n_embd) continue;
    diff += (double(g[i]) - w[i]) * (double(g[i]) - w[i]);
    norm += double(w[i]) * w[i];
  }
  return {diff, norm};
}

class Equivalence : public ::testing::TestWithParam<Layout> {};

TEST_P(Equivalence, MatchesOneProcess) {
  const Layout l = GetParam();
  if (test::world_size() != l.np) GTEST_SKIP() << l.name << " runs with " << l.np << " processes";
  const data::TokenSplits data = test::pangram_text(61);
  const test::GPTRunOptions options = options_for(l);
  comm::DeviceMesh mesh(comm::make_mpi_world(), l.tp, l.pp);
  const int dp = mesh.layout().dp_size();

  RunResult ref;
  if (mesh.rank() == 0) {
    // One process on the whole batch: dp times the micro-batch, same accumulation.
    test::GPTRunOptions one = options;
    one.engine.micro_batch *= dp;
    one.engine.data_parallel = {};
    test::GPTEngine reference(one, data);
    ref = train(reference.engine, int(options.engine.steps));
  }
  test::GPTEngine trainer(options, data, &mesh);
  EXPECT_EQ(trainer.engine.global_batch(), options.engine.micro_batch * dp * options.engine.grad_accum);
  const RunResult got = train(trainer.engine, int(options.engine.steps));

  // Every rank reports the same loss; rank 0 compares with the reference.
  if (mesh.rank() != 0) return;
  for (std::size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << "loss of step " << i + 1;
    EXPECT_NEAR(got.norms[i], ref.norms[i], 1e-5 * std::abs(ref.norms[i]) + 1e-7) << "grad norm of step " << i + 1;
  }
  EXPECT_NEAR(got.val, ref.val, 1e-5 * std::abs(ref.val)) << "validation loss";
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference run should learn";
  // The full weights as one vector within 1e-5 relative; each tensor within
  // 5e-5 (AdamW turns rounding differences in small gradients into slightly
  // different steps; a missing or doubled reduction is off by far more).
  ASSERT_EQ(got.weights.size(), ref.weights.size());
  Distance all;
  for (const auto& [name, want] : ref.weights) {
    ASSERT_TRUE(got.weights.count(name)) << name << " missing from the parallel run";
    const Distance d = distance(got.weights.at(name), want, name, options.model.n_embd);
    EXPECT_LE(d.relative(), 5e-5) << "final weights of " << name;
    all.diff2 += d.diff2;
    all.norm2 += d.norm2;
  }
  EXPECT_LE(all.relative(), 1e-5) << "final weights of the whole model";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Equivalence,
    ::testing::Values(
        Layout{"dp2", 2, 1, 1, 0, 0, parallel::Schedule::k1F1B, 1, true}, Layout{"dp2_accum3", 2, 1, 1, 0, 0, parallel::Schedule::k1F1B, 3, true},
        Layout{"zero1_dp2", 2, 1, 1, 1, 0, parallel::Schedule::k1F1B, 1, true}, Layout{"zero2_dp2", 2, 1, 1, 2, 0, parallel::Schedule::k1F1B, 1, true},
        Layout{"zero3_dp2", 2, 1, 1, 3, 0, parallel::Schedule::k1F1B, 2, true}, Layout{"tp2", 2, 2, 1, 0, 0, parallel::Schedule::k1F1B, 1, false},
        Layout{"pp2_gpipe", 2, 1, 2, 0, 0, parallel::Schedule::kGPipe, 3, false},
        Layout{"pp2_1f1b", 2, 1, 2, 0, 0, parallel::Schedule::k1F1B, 3, false},
        Layout{"dp4", 4, 1, 1, 0, 0, parallel::Schedule::k1F1B, 1, true}, Layout{"zero1_dp4", 4, 1, 1, 1, 0, parallel::Schedule::k1F1B, 1, true},
        Layout{"zero2_dp4", 4, 1, 1, 2, 0, parallel::Schedule::k1F1B, 1, true}, Layout{"zero3_dp4", 4, 1, 1, 3, 0, parallel::Schedule::k1F1B, 1, true},
        Layout{"zero3_dp4_shard2", 4, 1, 1, 3, 2, parallel::Schedule::k1F1B, 1, true},
        Layout{"zero2_dp4_shard2", 4, 1, 1, 2, 2, parallel::Schedule::k1F1B, 2, true},
        Layout{"tp4", 4, 4, 1, 0, 0, parallel::Schedule::k1F1B, 1, false},
        Layout{"pp4_gpipe", 4, 1, 4, 0, 0, parallel::Schedule::kGPipe, 4, false},
        Layout{"pp4_1f1b", 4, 1, 4, 0, 0, parallel::Schedule::k1F1B, 4, false}, Layout{"dp2_tp2", 4, 2, 1, 0, 0, parallel::Schedule::k1F1B, 1, false},
        Layout{"dp2_pp2", 4, 1, 2, 0, 0, parallel::Schedule::k1F1B, 2, false}, Layout{"tp2_pp2", 4, 2, 2, 0, 0, parallel::Schedule::k1F1B, 2, false},
        Layout{"zero3_dp2_tp2", 4, 2, 1, 3, 0, parallel::Schedule::k1F1B, 1, false},
        Layout{"zero2_dp2_pp2", 4, 1, 2, 2, 0, parallel::Schedule::k1F1B, 2, false},
        Layout{"dp2_tp2_pp2", 8, 2, 2, 0, 0, parallel::Schedule::k1F1B, 2, false},
        Layout{"zero1_dp2_tp2_pp2", 8, 2, 2, 1, 0, parallel::Schedule::kGPipe, 2, false},
        Layout{"zero3_dp2_tp2_pp2", 8, 2, 2, 3, 0, parallel::Schedule::k1F1B, 2, false}),
    layout_name);

// Layouts that cannot split the model are refused before any training, on every rank.
TEST(UnevenSplits, HeadsNotDivisibleByTpFailClearly) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  const data::TokenSplits data = test::pangram_text(61);
  test::GPTRunOptions o = options_for(Layout{"odd", 2, 2, 1, 0, 0, parallel::Schedule::k1F1B, 1, true});
  o.model.vocab_size = 62;  // the vocabulary would split; the 3 heads do not
  comm::DeviceMesh mesh(comm::make_mpi_world(), 2, 1);
  EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig, {"n_head=3 does not split over --tp 2"}));
}

TEST(UnevenSplits, MoreStagesThanLayersFailClearly) {
  if (test::world_size() != 4) GTEST_SKIP() << "runs with 4 processes";
  const data::TokenSplits data = test::pangram_text(61);
  test::GPTRunOptions o = options_for(Layout{"odd", 4, 1, 4, 0, 0, parallel::Schedule::k1F1B, 1, true});  // 3 layers
  comm::DeviceMesh mesh(comm::make_mpi_world(), 1, 4);
  EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig, {"3 layers cannot fill 4 pipeline stages"}));
}

TEST(UnevenSplits, ShardGroupMustDivideDp) {
  if (test::world_size() != 4) GTEST_SKIP() << "runs with 4 processes";
  const data::TokenSplits data = test::pangram_text(61);
  test::GPTRunOptions o = options_for(Layout{"odd", 4, 1, 1, 3, 3, parallel::Schedule::k1F1B, 1, true});
  comm::DeviceMesh mesh(comm::make_mpi_world(), 1, 1);
  EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig, {"--zero-shard-group 3 must divide the data-parallel size 4"}));
}

}  // namespace
}  // namespace ht::train
