// Activation recomputation under parallel layouts: on ZeRO-3 over dp 2 (the
// re-run of a block reads parameters the pre-backward hook gathered), tp 2
// (the re-run repeats the forward's all-reduces on both ranks alike) and
// 1F1B over 2 stages (several micro-batches' contexts in flight), selective
// and full recomputation give the very bits of no recomputation: every
// step's loss and gradient norm, and the final full weights, for the GPT and
// the Llama; with 4 processes, ZeRO-3 and tp 2 together. Each ctest entry
// runs the layouts of its process count; the others skip.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "ht/comm/mpi_communicator.h"
#include "lm_engine.h"
#include "mpi_test_util.h"

namespace ht::train {
namespace {

using nn::Recompute;

struct Layout {
  std::string name;
  int np, tp, pp, zero;
  int grad_accum = 1;
  bool llama = false;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

struct Bits {
  std::vector<std::uint32_t> losses, norms, weights;
};

void append_bits(const Tensor& t, std::vector<std::uint32_t>& out) {
  for (float v : t.to_vector<float>()) out.push_back(std::bit_cast<std::uint32_t>(v));
}

template <typename Engine, typename Options>
Bits train(const Options& options, const Layout& l, Recompute mode, const data::TokenSplits& data) {
  Options o = options;
  o.engine.recompute = mode;
  comm::DeviceMesh mesh(comm::make_mpi_world(), l.tp, l.pp);
  Engine e(o, data, &mesh);
  Bits b;
  for (std::int64_t i = 0; i < o.engine.steps; ++i) {
    const StepStats s = e.engine.step();
    b.losses.push_back(std::bit_cast<std::uint32_t>(s.loss));
    b.norms.push_back(std::bit_cast<std::uint32_t>(s.grad_norm));
  }
  for (const auto& [name, w] : e.engine.full_parameters()) append_bits(w, b.weights);  // rank 0 only
  return b;
}

template <typename Engine, typename Options>
void expect_same_bits(const Options& o, const Layout& l, const data::TokenSplits& data) {
  const Bits none = train<Engine>(o, l, Recompute::kNone, data);
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    const Bits got = train<Engine>(o, l, mode, data);
    const char* name = nn::recompute_name(mode);
    EXPECT_EQ(got.losses, none.losses) << l.name << " " << name << ": losses";
    EXPECT_EQ(got.norms, none.norms) << l.name << " " << name << ": gradient norms";
    EXPECT_EQ(got.weights, none.weights) << l.name << " " << name << ": final weights";
  }
  if (test::world_rank() == 0) EXPECT_FALSE(none.weights.empty());
}

class RecomputeLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(RecomputeLayouts, SameBitsAsNoRecomputation) {
  const Layout l = GetParam();
  if (test::world_size() != l.np) GTEST_SKIP() << l.name << " runs with " << l.np << " processes";
  test::GPTRunOptions g;
  g.model = {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 4, .n_embd = 32};
  g.seq_len = 16;
  g.engine.micro_batch = 2;
  g.engine.grad_accum = l.grad_accum;
  g.engine.steps = 3;
  g.engine.warmup_steps = 1;
  g.engine.eval_samples = 0;
  g.engine.data_parallel = {.zero_stage = l.zero, .bucket_bytes = 16 << 10};
  g.engine.schedule = parallel::Schedule::k1F1B;
  const data::TokenSplits data = test::pangram_text(64);
  if (!l.llama) return expect_same_bits<test::GPTEngine>(g, l, data);
  test::LlamaRunOptions o;
  o.model = {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_embd = 32,
             .ffn_hidden = 48};
  o.seq_len = g.seq_len;
  o.engine = g.engine;
  expect_same_bits<test::LlamaEngine>(o, l, data);
}

INSTANTIATE_TEST_SUITE_P(Layouts, RecomputeLayouts,
                         ::testing::Values(Layout{"zero3_dp2", 2, 1, 1, 3, 2}, Layout{"tp2", 2, 2, 1, 0},
                                           Layout{"pp2_1f1b", 2, 1, 2, 0, 3},
                                           Layout{"llama_zero3_dp2", 2, 1, 1, 3, 2, true},
                                           Layout{"llama_tp2", 2, 2, 1, 0, 1, true},
                                           Layout{"llama_pp2_1f1b", 2, 1, 2, 0, 3, true},
                                           Layout{"zero3_dp2_tp2", 4, 2, 1, 3, 2},
                                           Layout{"llama_zero3_dp2_tp2", 4, 2, 1, 3, 2, true}),
                         [](const ::testing::TestParamInfo<Layout>& info) { return info.param.name; });

}  // namespace
}  // namespace ht::train
