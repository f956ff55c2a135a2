// Activation recomputation under parallel layouts: on ZeRO-3 over dp 2 (the
// re-run of a block reads parameters the pre-backward hook gathered), tp 2
// (the re-run repeats the forward's all-reduces on both ranks alike) and
// 1F1B over 2 stages (several micro-batches' contexts in flight), selective
// and full recomputation give the very bits of no recomputation: every
// step's loss and gradient norm, and the final full weights, for the GPT and
// the Llama; with 4 processes, ZeRO-3 and tp 2 together; and with each
// sequence split over cp 2 ranks. Each ctest entry
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

using parallel::Layout;

/// A layout (micro-batches of 2 rows) on the GPT or the Llama.
struct Case {
  Layout layout;
  bool llama = false;
  std::string name() const { return (llama ? "llama_" : "") + layout.name(); }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

struct Bits {
  std::vector<std::uint32_t> losses, norms, weights;
};

void append_bits(const Tensor& t, std::vector<std::uint32_t>& out) {
  for (float v : t.to_vector<float>()) out.push_back(std::bit_cast<std::uint32_t>(v));
}

template <typename Engine, typename Options>
Bits train(const Options& options, Recompute mode, const data::TokenSplits& data) {
  Options o = options;
  o.engine.recompute = mode;
  comm::DeviceMesh mesh(comm::make_mpi_world(), o.engine.layout.tp, o.engine.layout.pp, o.engine.layout.cp);
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
void expect_same_bits(const Options& o, const data::TokenSplits& data) {
  const std::string name = o.engine.layout.name();
  const Bits none = train<Engine>(o, Recompute::kNone, data);
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    const Bits got = train<Engine>(o, mode, data);
    const char* how = nn::recompute_name(mode);
    EXPECT_EQ(got.losses, none.losses) << name << " " << how << ": losses";
    EXPECT_EQ(got.norms, none.norms) << name << " " << how << ": gradient norms";
    EXPECT_EQ(got.weights, none.weights) << name << " " << how << ": final weights";
  }
  if (test::world_rank() == 0) EXPECT_FALSE(none.weights.empty());
}

class RecomputeLayouts : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeLayouts, SameBitsAsNoRecomputation) {
  const Case c = GetParam();
  if (test::world_size() != c.layout.world())
    GTEST_SKIP() << c.name() << " runs with " << c.layout.world() << " processes";
  test::GPTRunOptions g;
  g.model = {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 4, .n_embd = 32};
  g.seq_len = 16;
  g.engine.layout = c.layout;
  g.engine.steps = 3;
  g.engine.warmup_steps = 1;
  g.engine.eval_samples = 0;
  g.engine.bucket_bytes = 16 << 10;
  const data::TokenSplits data = test::pangram_text(64);
  if (!c.llama) return expect_same_bits<test::GPTEngine>(g, data);
  test::LlamaRunOptions o;
  o.model = {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_embd = 32,
             .ffn_hidden = 48};
  o.seq_len = g.seq_len;
  o.engine = g.engine;
  expect_same_bits<test::LlamaEngine>(o, data);
}

INSTANTIATE_TEST_SUITE_P(Layouts, RecomputeLayouts,
                         ::testing::Values(Case{{.dp = 2, .zero = 3, .micro_batch = 2, .grad_accum = 2}},
                                           Case{{.tp = 2, .dp = 1, .micro_batch = 2}},
                                           Case{{.pp = 2, .dp = 1, .micro_batch = 2, .grad_accum = 3}},
                                           Case{{.dp = 2, .zero = 3, .micro_batch = 2, .grad_accum = 2}, true},
                                           Case{{.tp = 2, .dp = 1, .micro_batch = 2}, true},
                                           Case{{.pp = 2, .dp = 1, .micro_batch = 2, .grad_accum = 3}, true},
                                           Case{{.tp = 2, .dp = 2, .zero = 3, .micro_batch = 2, .grad_accum = 2}},
                                           Case{{.tp = 2, .dp = 2, .zero = 3, .micro_batch = 2, .grad_accum = 2}, true},
                                           // The re-run repeats context parallelism's all-gathers.
                                           Case{{.dp = 1, .cp = 2, .micro_batch = 2}},
                                           Case{{.dp = 1, .cp = 2, .micro_batch = 2}, true}),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name(); });

}  // namespace
}  // namespace ht::train
