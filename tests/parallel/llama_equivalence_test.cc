// The Llama model trains like one process under every kind of parallelism:
// 20 AdamW steps of a tiny Llama (grouped-query attention, SwiGLU, rotary
// positions) from the same initial weights give the same losses, gradient
// norms and final full weights as a single process on the whole batch (fp32,
// within 1e-5 relative), under ZeRO-3 over dp2, tp2 (the two key/value heads
// and the packed gate_up split over the ranks), pp2 with gradient
// accumulation (3 layers split unevenly; 1F1B and GPipe), ZeRO-3 over
// dp2 x tp2, tp2 x pp2, and dp2 x tp2 x pp2 (plain and ZeRO-3). Each ctest
// entry runs the layouts of its process count; the others skip. parallel_equivalence_test.cc does the same for GPT.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ht/comm/mpi_communicator.h"
#include "llama_engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

struct Layout {
  std::string name;
  int np, tp, pp, zero;
  int grad_accum = 1;
  parallel::Schedule schedule = parallel::Schedule::k1F1B;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) { return info.param.name; }

test::LlamaRunOptions options_for(const Layout& l) {
  test::LlamaRunOptions o;
  // Two query heads per key/value head; the key/value heads, the MLP's hidden
  // units and the vocabulary split over tp 2; 3 layers split unevenly over 2
  // stages.
  o.model = {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_embd = 32,
             .ffn_hidden = 48};
  o.seq_len = 8;
  o.engine.micro_batch = 2;
  o.engine.grad_accum = l.grad_accum;
  o.engine.steps = 20;
  o.engine.warmup_steps = 3;
  o.engine.lr = 1e-3f;
  o.engine.min_lr = 1e-4f;
  o.engine.grad_clip = 1.f;
  o.engine.eval_batches = 2;
  o.engine.data_parallel = {.zero_stage = l.zero, .bucket_bytes = 16 << 10};
  o.engine.schedule = l.schedule;
  return o;
}

struct RunResult {
  std::vector<float> losses, norms;
  float val = 0;
  std::map<std::string, Tensor> weights;
};

RunResult train(Engine& e, int steps) {
  RunResult r;
  for (int i = 0; i < steps; ++i) {
    const StepStats s = e.step();
    r.losses.push_back(s.loss);
    r.norms.push_back(s.grad_norm);
  }
  r.val = e.evaluate();
  r.weights = e.full_parameters();
  return r;
}

struct Distance {
  double diff2 = 0, norm2 = 0;
  double relative() const { return std::sqrt(diff2) / std::max(std::sqrt(norm2), 1e-30); }
};

// ||got - want||^2 and ||want||^2 over a tensor. Llama has no parameter whose
// gradient vanishes in exact arithmetic (GPT's key bias), so every element counts.
Distance distance(const Tensor& got, const Tensor& want, const std::string& name) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  EXPECT_EQ(g.size(), w.size()) << name;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    diff += (double(g[i]) - w[i]) * (double(g[i]) - w[i]);
    norm += double(w[i]) * w[i];
  }
  return {diff, norm};
}

class LlamaEquivalence : public ::testing::TestWithParam<Layout> {};

TEST_P(LlamaEquivalence, MatchesOneProcess) {
  const Layout l = GetParam();
  if (test::world_size() != l.np) GTEST_SKIP() << l.name << " runs with " << l.np << " processes";
  const test::LlamaRunOptions options = options_for(l);
  const data::TokenSplits data = test::pangram_text(options.model.vocab_size);
  comm::DeviceMesh mesh(comm::make_mpi_world(), l.tp, l.pp);
  const int dp = mesh.layout().dp_size();

  RunResult ref;
  if (mesh.rank() == 0) {
    // One process on the whole batch: dp times the micro-batch, same accumulation.
    test::LlamaRunOptions one = options;
    one.engine.micro_batch *= dp;
    one.engine.data_parallel = {};
    test::LlamaEngine reference(one, data);
    ref = train(reference.engine, int(options.engine.steps));
  }
  test::LlamaEngine trained(options, data, &mesh);
  EXPECT_EQ(trained.engine.global_batch(), options.engine.micro_batch * dp * options.engine.grad_accum);
  const RunResult got = train(trained.engine, int(options.engine.steps));

  // Every rank reports the same loss; rank 0 compares with the reference.
  if (mesh.rank() != 0) return;
  for (std::size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << "loss of step " << i + 1;
    EXPECT_NEAR(got.norms[i], ref.norms[i], 1e-5 * std::abs(ref.norms[i]) + 1e-7) << "grad norm of step " << i + 1;
  }
  EXPECT_NEAR(got.val, ref.val, 1e-5 * std::abs(ref.val)) << "validation loss";
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.1f) << "the reference run should learn";
  // The full weights as one vector within 1e-5 relative; each tensor within
  // 5e-5 (AdamW turns rounding differences in small gradients into slightly
  // different steps; a missing or doubled reduction is off by far more).
  ASSERT_EQ(got.weights.size(), ref.weights.size());
  Distance all;
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, want] : ref.weights) {
    ASSERT_TRUE(got.weights.count(name)) << name << " missing from the parallel run";
    EXPECT_EQ(got.weights.at(name).shape(), want.shape()) << name;
    const Distance d = distance(got.weights.at(name), want, name);
    EXPECT_LE(d.relative(), 5e-5) << "final weights of " << name;
    if (d.relative() >= worst) worst = d.relative(), worst_name = name;
    all.diff2 += d.diff2;
    all.norm2 += d.norm2;
  }
  EXPECT_LE(all.relative(), 1e-5) << "final weights of the whole model";
  std::printf("%s: loss %.5f -> %.5f; final weights rel err %.2e (worst tensor %s %.2e)\n", l.name.c_str(),
              ref.losses.front(), ref.losses.back(), all.relative(), worst_name.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Layouts, LlamaEquivalence,
                         ::testing::Values(Layout{"zero3_dp2", 2, 1, 1, 3, 2}, Layout{"tp2", 2, 2, 1, 0, 1},
                                           Layout{"pp2_1f1b_accum3", 2, 1, 2, 0, 3},
                                           Layout{"pp2_gpipe_accum2", 2, 1, 2, 0, 2, parallel::Schedule::kGPipe},
                                           Layout{"zero3_dp2_tp2", 4, 2, 1, 3, 1},
                                           Layout{"tp2_pp2_accum2", 4, 2, 2, 0, 2},
                                           Layout{"dp2_tp2_pp2", 8, 2, 2, 0, 2},
                                           Layout{"zero3_dp2_tp2_pp2", 8, 2, 2, 3, 2}),
                         layout_name);

// A tp size that does not divide the key/value heads is refused before any
// training, on every rank, naming the value.
TEST(LlamaUnevenSplits, KvHeadsNotDivisibleByTpFailClearly) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  test::LlamaRunOptions o = options_for(Layout{"mqa_tp2", 2, 2, 1, 0, 1});
  o.model.n_kv_head = 1;  // multi-query: one key/value head cannot split over 2 ranks
  const data::TokenSplits data = test::pangram_text(o.model.vocab_size);
  comm::DeviceMesh mesh(comm::make_mpi_world(), 2, 1);
  EXPECT_TRUE(test::throws_error([&] { test::LlamaEngine e(o, data, &mesh); }, ErrorKind::kConfig,
                                 {"n_kv_head=1 does not split over --tp 2"}));
}

}  // namespace
}  // namespace ht::train
