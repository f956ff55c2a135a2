// Every parallel layout trains like one process: 20 AdamW steps (8 under
// context parallelism) of a small GPT, or of a small Llama (grouped-query
// attention, SwiGLU, rotary positions), from the same initial weights give the same losses, gradient
// norms and final full weights as a single process on the whole batch (fp32,
// within 1e-5 relative); pipelines split the blocks by count or into stages
// of chosen sizes (--stage-layers). Each ctest entry runs the layouts of its
// process count; the others skip. Layouts that cannot split the model fail
// at start-up with a clear error on every rank.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <mpi.h>

#include "ht/comm/mpi_communicator.h"
#include "ht/parallel/tables.h"
#include "lm_engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

using parallel::Layout;
using parallel::Schedule;

/// One layout on one model. Every case runs micro-batches of 2 rows on
/// layout.world() processes.
struct Case {
  Layout layout;
  bool odd_model = false;     // counts divisible by nothing (dp-only layouts)
  bool llama = false;         // the Llama instead of the GPT
  bool padded_vocab = false;  // 61 ids in 64 rows (a multiple of 16): split over tp only with the padding
  int n_layer = 0;            // 0: the model's own (5 for the GPT, 3 for the Llama)

  Case(Layout l, bool odd = false, bool llama_model = false, bool padded = false, int layers = 0)
      : layout(std::move(l)), odd_model(odd), llama(llama_model), padded_vocab(padded), n_layer(layers) {
    layout.micro_batch = 2;
  }
  int np() const { return layout.world(); }
  /// The layout's own name, after the model when it is not the plain GPT.
  std::string name() const {
    std::string n = llama ? "llama_" : odd_model ? "odd_gpt_" : "";
    n += layout.name();
    if (padded_vocab) n += "_padded_vocab";
    if (n_layer > 0) n += "_" + std::to_string(n_layer) + "_layers";
    return n;
  }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name(); }

test::GPTRunOptions options_for(const Case& c) {
  test::GPTRunOptions o;
  // Odd model: parameter counts that no dp size divides (flat groups pad).
  // Otherwise heads and vocabulary split over tp 4, and 5 layers split
  // unevenly over 2 and 4 stages.
  o.model = c.odd_model ? models::GPTConfig{.vocab_size = 61, .context = 16, .n_layer = 3, .n_head = 3, .n_embd = 30}
                        : models::GPTConfig{.vocab_size = 64, .context = 16, .n_layer = 5, .n_head = 4, .n_embd = 32};
  if (c.padded_vocab) {
    o.model.vocab_size = 61;
    o.model.vocab_multiple = 16;
  }
  // Context parallelism cuts each sequence into 2 cp chunks: 16 positions
  // give cp 4 chunks of 2.
  o.seq_len = c.layout.cp > 1 ? 16 : 8;
  o.engine.layout = c.layout;
  // Fewer steps under cp: its collectives per layer are slow on
  // oversubscribed cores, and 8 steps already compound any error.
  o.engine.steps = c.layout.cp > 1 ? 8 : 20;
  o.engine.warmup_steps = 3;
  o.engine.lr = 1e-3f;
  o.engine.min_lr = 1e-4f;
  o.engine.grad_clip = 1.f;
  o.engine.eval_samples = 16;
  o.engine.bucket_bytes = 16 << 10;
  if (c.n_layer > 0) o.model.n_layer = c.n_layer;
  return o;
}

// Two query heads per key/value head; the key/value heads, the MLP's hidden
// units and the vocabulary split over tp 2; 3 layers split unevenly over 2
// stages.
test::LlamaRunOptions llama_options_for(const Case& c) {
  const test::GPTRunOptions g = options_for(c);
  test::LlamaRunOptions o;
  o.model = {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_embd = 32,
             .ffn_hidden = 48};
  if (c.n_layer > 0) o.model.n_layer = c.n_layer;
  o.seq_len = g.seq_len;
  o.engine = g.engine;
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
  r.val = float(t.evaluate().loss);
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

// `data_vocab`: the pangram text's vocabulary (at most the model's).
template <typename Engine, typename Options>
void expect_matches_one_process(const Case& c, const Options& options, std::int64_t data_vocab) {
  const Layout& l = c.layout;
  const data::TokenSplits data = test::pangram_text(data_vocab);
  comm::DeviceMesh mesh(comm::make_mpi_world(), l.tp, l.pp, l.cp);
  const int dp = mesh.shape().dp_size();

  RunResult ref;
  if (mesh.rank() == 0) {
    // One process on the whole batch: dp times the micro-batch, same accumulation.
    Options one = options;
    one.engine.layout.micro_batch *= dp;  // the rest of the layout: one process, tp1 pp1 dp1 zero0
    one.engine.layout = {.micro_batch = one.engine.layout.micro_batch, .grad_accum = l.grad_accum};
    Engine reference(one, data);
    ref = train(reference.engine, int(options.engine.steps));
  }
  Engine trainer(options, data, &mesh);
  EXPECT_EQ(trainer.engine.global_batch(), options.engine.layout.micro_batch * dp * options.engine.layout.grad_accum);
  if (!l.stage_layers.empty()) {
    // This rank's stage holds the blocks the split chose ("h.3..." or "layers.3..."), no others.
    EXPECT_EQ(trainer.engine.stage_split(), l.stage_layers);
    // Interleaved: rank r holds virtual stages r, pp + r, ...
    const std::vector<int> b = parallel::stage_boundaries(l.stage_layers, l.pp * l.virtual_stages);
    const int rank = mesh.coord().pp_rank;
    std::set<int> blocks;
    for (const nn::Parameter* p : trainer.engine.model().parameters()) {
      const std::string& n = p->name();
      const std::string prefix = c.llama ? "layers." : "h.";
      if (n.rfind(prefix, 0) == 0) blocks.insert(std::stoi(n.substr(prefix.size())));
    }
    std::set<int> want;
    for (int stage = rank; stage < l.pp * l.virtual_stages; stage += l.pp)
      for (int i = b[std::size_t(stage)]; i < b[std::size_t(stage) + 1]; ++i) want.insert(i);
    EXPECT_EQ(blocks, want) << "the blocks of pipeline rank " << rank;
  }
  const RunResult got = train(trainer.engine, int(options.engine.steps));
  if (l.virtual_stages > 1 && dp > 1) {
    // Each chunk's buckets start reducing at that chunk's last backward, not
    // all at the step's end: every group but the one holding a tied weight
    // (summed across stages first) had started before finish_gradients.
    const parallel::ReductionTimes& rt = trainer.engine.data_parallel().reduction_times();
    EXPECT_GE(rt.early_groups, rt.groups - 1) << "of " << rt.groups << " groups";
    EXPECT_GT(rt.groups, 2);
  }

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
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, want] : ref.weights) {
    ASSERT_TRUE(got.weights.count(name)) << name << " missing from the parallel run";
    EXPECT_EQ(got.weights.at(name).shape(), want.shape()) << name;
    const Distance d = distance(got.weights.at(name), want, name, options.model.n_embd);
    EXPECT_LE(d.relative(), 5e-5) << "final weights of " << name;
    if (d.relative() >= worst) worst = d.relative(), worst_name = name;
    all.diff2 += d.diff2;
    all.norm2 += d.norm2;
  }
  EXPECT_LE(all.relative(), 1e-5) << "final weights of the whole model";
  std::printf("%s: loss %.5f -> %.5f; final weights rel err %.2e (worst tensor %s %.2e)\n", c.name().c_str(),
              ref.losses.front(), ref.losses.back(), all.relative(), worst_name.c_str(), worst);
}

class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, MatchesOneProcess) {
  const Case c = GetParam();
  if (test::world_size() != c.np()) GTEST_SKIP() << c.name() << " runs with " << c.np() << " processes";
  if (c.llama)
    expect_matches_one_process<test::LlamaEngine>(c, llama_options_for(c), 64);
  else
    expect_matches_one_process<test::GPTEngine>(c, options_for(c), 61);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Equivalence,
    ::testing::Values(
        Case{{.dp = 2}, true}, Case{{.dp = 2, .grad_accum = 3}, true},
        Case{{.dp = 2, .zero = 1}, true}, Case{{.dp = 2, .zero = 2}, true},
        Case{{.dp = 2, .zero = 3, .grad_accum = 2}, true}, Case{{.tp = 2, .dp = 1}},
        Case{{.pp = 2, .dp = 1, .grad_accum = 3, .schedule = Schedule::kGPipe}},
        Case{{.pp = 2, .dp = 1, .grad_accum = 3}},
        // Chosen stages (--stage-layers) of the 5 blocks: a light first
        // stage, then a light last one (by count: 3 + 2).
        Case{{.pp = 2, .dp = 1, .grad_accum = 3, .stage_layers = {1, 4}}},
        Case{{.pp = 2, .dp = 1, .grad_accum = 2, .schedule = Schedule::kGPipe, .stage_layers = {4, 1}}},
        Case{{.dp = 4}, true}, Case{{.dp = 4, .zero = 1}, true},
        Case{{.dp = 4, .zero = 2}, true}, Case{{.dp = 4, .zero = 3}, true},
        Case{{.dp = 4, .zero = 3, .shard_group = 2}, true},
        Case{{.dp = 4, .zero = 2, .shard_group = 2, .grad_accum = 2}, true},
        Case{{.tp = 4, .dp = 1}},
        Case{{.pp = 4, .dp = 1, .grad_accum = 4, .schedule = Schedule::kGPipe}},
        Case{{.pp = 4, .dp = 1, .grad_accum = 4}},
        Case{{.pp = 4, .dp = 1, .grad_accum = 4, .stage_layers = {1, 1, 2, 1}}},
        Case{{.tp = 2, .dp = 2}},
        Case{{.pp = 2, .dp = 2, .grad_accum = 2}}, Case{{.tp = 2, .pp = 2, .dp = 1, .grad_accum = 2}},
        Case{{.tp = 2, .dp = 2, .zero = 3}},
        Case{{.pp = 2, .dp = 2, .zero = 2, .grad_accum = 2}},
        Case{{.tp = 2, .pp = 2, .dp = 2, .grad_accum = 2}},
        Case{{.tp = 2, .pp = 2, .dp = 2, .zero = 1, .grad_accum = 2, .schedule = Schedule::kGPipe}},
        Case{{.tp = 2, .pp = 2, .dp = 2, .zero = 3, .grad_accum = 2}},
        // The padding rows' logits must stay out of the loss on every rank,
        // and the tied wte's padding out of the gradient sum across stages.
        Case{{.tp = 2, .dp = 1}, false, false, true},
        Case{{.tp = 2, .pp = 2, .dp = 2, .zero = 1, .grad_accum = 2}, false, false, true},
        // Llama: the key/value heads and the packed gate_up split over tp.
        Case{{.dp = 2, .zero = 3, .grad_accum = 2}, false, true},
        Case{{.tp = 2, .dp = 1}, false, true},
        Case{{.pp = 2, .dp = 1, .grad_accum = 3}, false, true},
        Case{{.pp = 2, .dp = 1, .grad_accum = 2, .schedule = Schedule::kGPipe}, false, true},
        Case{{.pp = 2, .dp = 1, .grad_accum = 2, .stage_layers = {1, 2}}, false, true},
        Case{{.tp = 2, .dp = 2, .zero = 3}, false, true},
        Case{{.tp = 2, .pp = 2, .dp = 1, .grad_accum = 2}, false, true},
        Case{{.tp = 2, .pp = 2, .dp = 2, .grad_accum = 2}, false, true},
        Case{{.tp = 2, .pp = 2, .dp = 2, .zero = 3, .grad_accum = 2}, false, true},
        // ZB-H1: the weight gradients deferred, so data parallelism and
        // ZeRO see them complete only in the last W.
        Case{{.pp = 2, .dp = 1, .grad_accum = 3, .schedule = Schedule::kZeroBubbleH1}},
        Case{{.pp = 2, .dp = 1, .grad_accum = 3, .schedule = Schedule::kZeroBubbleH1}, false, true},
        Case{{.pp = 4, .dp = 1, .grad_accum = 4, .schedule = Schedule::kZeroBubbleH1}},
        Case{{.pp = 2, .dp = 2, .grad_accum = 2, .schedule = Schedule::kZeroBubbleH1}},
        Case{{.tp = 2, .pp = 2, .dp = 1, .grad_accum = 2, .schedule = Schedule::kZeroBubbleH1}},
        Case{{.pp = 2, .dp = 2, .zero = 3, .grad_accum = 2, .schedule = Schedule::kZeroBubbleH1}},
        // Interleaved: v chunks per rank around the ring (5 layers over 4
        // virtual stages, 8 over 8).
        Case{{.pp = 2, .dp = 1, .grad_accum = 4, .schedule = Schedule::kInterleaved, .virtual_stages = 2}},
        Case{{.pp = 2, .dp = 1, .grad_accum = 2, .schedule = Schedule::kInterleaved, .virtual_stages = 2}, false, true, false, 4},
        Case{{.pp = 4, .dp = 1, .grad_accum = 4, .schedule = Schedule::kInterleaved, .virtual_stages = 2}, false, false, false, 8},
        Case{{.pp = 2, .dp = 1, .grad_accum = 2, .schedule = Schedule::kInterleaved, .virtual_stages = 3}, false, false, false, 6},
        Case{{.tp = 2, .pp = 2, .dp = 1, .grad_accum = 2, .schedule = Schedule::kInterleaved, .virtual_stages = 2}},
        Case{{.pp = 2, .dp = 2, .zero = 1, .grad_accum = 2, .schedule = Schedule::kInterleaved, .virtual_stages = 2, .stage_layers = {2, 1, 1, 1}}},
        // Context parallelism: each sequence over cp ranks (learned
        // positions for the GPT, rotary for the Llama), alone and with tp,
        // pp (1F1B, interleaved, ZB-H1) and ZeRO 1-3 over dp x cp.
        Case{{.dp = 1, .cp = 2}}, Case{{.dp = 1, .cp = 4}}, Case{{.tp = 2, .dp = 1, .cp = 2}},
        Case{{.pp = 2, .dp = 1, .cp = 2, .grad_accum = 2}}, Case{{.dp = 2, .cp = 2, .zero = 3, .grad_accum = 2}},
        Case{{.dp = 2, .cp = 2, .zero = 1}}, Case{{.dp = 2, .cp = 2, .zero = 2, .grad_accum = 2}},
        Case{{.pp = 2, .dp = 1, .cp = 2, .grad_accum = 2, .schedule = Schedule::kInterleaved, .virtual_stages = 2},
             false, false, false, 4},
        Case{{.pp = 2, .dp = 1, .cp = 2, .grad_accum = 2, .schedule = Schedule::kZeroBubbleH1}},
        Case{{.dp = 1, .cp = 2}, false, true}, Case{{.dp = 1, .cp = 4}, false, true},
        Case{{.tp = 2, .dp = 1, .cp = 2}, false, true}, Case{{.pp = 2, .dp = 1, .cp = 2, .grad_accum = 2}, false, true},
        Case{{.dp = 2, .cp = 2, .zero = 3, .grad_accum = 2}, false, true}),
    case_name);

// A model whose stage_input_shape is not what the stage before returns
// (GPT's stages pass (B, T, C); these declare (B, T, 2C) and (B, T, C/2)):
// the receiving stage fails at the first transfer's header naming both
// shapes, the sending one times out waiting for its gradient. Before, the
// larger tensor was written past the smaller buffer by Open MPI (a
// corrupted heap) or failed with a bare MPI_ERR_IN_STATUS.
template <int Num, int Den>
class ResizedInputGPT : public models::GPT {
 public:
  using models::GPT::GPT;
  Shape stage_input_shape(const Shape& input_shape) const override {
    Shape s = models::GPT::stage_input_shape(input_shape);
    s.back() = s.back() * Num / Den;
    return s;
  }
};

template <int Num, int Den>
void expect_stage_shape_named() {
  const data::TokenSplits data = test::pangram_text(61);
  const test::GPTRunOptions o = options_for(Case{{.pp = 2, .dp = 1}, true});
  comm::DeviceMesh mesh(comm::make_mpi_world({.timeout = std::chrono::seconds(3)}), 1, 2);
  test::LmEngine<ResizedInputGPT<Num, Den>, models::GPTConfig> t(o, data, &mesh);
  // The next case starts together: stage 0 leaves 3 s after stage 1.
  struct AtTheEnd {
    ~AtTheEnd() { MPI_Barrier(MPI_COMM_WORLD); }
  } barrier_after_the_engine [[maybe_unused]];
  const std::int64_t b = o.engine.layout.micro_batch, T = o.seq_len, C = o.model.n_embd;
  if (mesh.coord().pp_rank == 1) {
    EXPECT_TRUE(test::throws_error(
        [&] { t.engine.step(); }, ErrorKind::kShapeMismatch,
        {"pipeline stage 1 (chunk 0), micro-batch 0",
         fmt::format("rank 0 sends {} f32 where this stage expects {} f32 (its input: nn::Model::stage_input_shape)",
                     shape_str({b, T, C}), shape_str({b, T, C * Num / Den}))}));
  } else {
    EXPECT_THROW(t.engine.step(), CommError);
  }
}

// In the communicator's debug mode every transfer between stages carries
// its header (not only the first each way): the same pairing, so the same
// losses, under 1F1B's paired transfers and the interleaved ring.
TEST(StageBoundaries, DebugModeHeadsEveryTransferAndChangesNothing) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  const data::TokenSplits data = test::pangram_text(61);
  for (const Case& c : {Case{{.pp = 2, .dp = 1, .grad_accum = 4}, true},
                        Case{{.pp = 2, .dp = 1, .grad_accum = 2, .schedule = Schedule::kInterleaved,
                              .virtual_stages = 2}}}) {
    const test::GPTRunOptions o = options_for(c);
    std::vector<float> losses[2];
    for (const bool debug : {false, true}) {
      comm::DeviceMesh mesh(comm::make_mpi_world({.debug = debug}), 1, 2);
      test::GPTEngine t(o, data, &mesh);
      ASSERT_EQ(mesh.pp_group().debug(), debug);
      for (int step = 0; step < 3; ++step) losses[debug].push_back(t.engine.step().loss);
    }
    EXPECT_EQ(losses[0], losses[1]);
  }
}

TEST(StageBoundaries, AWrongStageInputShapeIsNamed) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  expect_stage_shape_named<2, 1>();  // declared larger than sent
  expect_stage_shape_named<1, 2>();  // declared smaller: the arriving tensor does not fit
}

// A declaration right at the first transfer (its header passes) and wrong
// after it: the later transfer's size is refused by the communicator, and
// the stage names the micro-batch and its declaration.
class WidensAfterFirstGPT : public models::GPT {
 public:
  using models::GPT::GPT;
  Shape stage_input_shape(const Shape& input_shape) const override {
    Shape s = models::GPT::stage_input_shape(input_shape);
    if (calls_++ > 0) s.back() *= 2;
    return s;
  }

 private:
  mutable int calls_ = 0;
};

TEST(StageBoundaries, ALaterTransferOfAnotherSizeIsNamed) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  const data::TokenSplits data = test::pangram_text(61);
  const test::GPTRunOptions o = options_for(Case{{.pp = 2, .dp = 1, .grad_accum = 2}, true});
  comm::DeviceMesh mesh(comm::make_mpi_world({.timeout = std::chrono::seconds(3)}), 1, 2);
  test::LmEngine<WidensAfterFirstGPT, models::GPTConfig> t(o, data, &mesh);
  struct AtTheEnd {
    ~AtTheEnd() { MPI_Barrier(MPI_COMM_WORLD); }
  } barrier_after_the_engine [[maybe_unused]];
  const std::int64_t b = o.engine.layout.micro_batch, T = o.seq_len, C = o.model.n_embd;
  if (mesh.coord().pp_rank == 1) {
    EXPECT_TRUE(test::throws_error(
        [&] { t.engine.step(); }, ErrorKind::kShapeMismatch,
        {"pipeline stage 1 (chunk 0), micro-batch 1: what the previous stage sent is not the input this stage declares",
         fmt::format("{} f32 ({} elements; nn::Model::stage_input_shape)", shape_str({b, T, 2 * C}), b * T * 2 * C),
         fmt::format("recv from rank 0 got {} elements of f32", b * T * C)}));
  } else {
    EXPECT_THROW(t.engine.step(), CommError);
  }
}

// Layouts that cannot split the model are refused before any training, on every rank.
TEST(UnevenSplits, HeadsNotDivisibleByTpFailClearly) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  const data::TokenSplits data = test::pangram_text(61);
  test::GPTRunOptions o = options_for(Case{{.tp = 2, .dp = 1}, true});
  o.model.vocab_size = 62;  // the vocabulary would split; the 3 heads do not
  comm::DeviceMesh mesh(comm::make_mpi_world(), 2, 1);
  EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig, {"n_head=3 does not split over --tp 2"}));
}

TEST(UnevenSplits, MoreStagesThanLayersFailClearly) {
  if (test::world_size() != 4) GTEST_SKIP() << "runs with 4 processes";
  const data::TokenSplits data = test::pangram_text(61);
  test::GPTRunOptions o = options_for(Case{{.pp = 4, .dp = 1}, true});  // 3 layers
  comm::DeviceMesh mesh(comm::make_mpi_world(), 1, 4);
  EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig, {"3 layers cannot fill 4 pipeline stages"}));
}

// --stage-layers that do not fit are refused on every rank, naming the split and a valid one.
TEST(UnevenSplits, ChosenStagesThatDoNotFitFailClearly) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  const data::TokenSplits data = test::pangram_text(61);
  comm::DeviceMesh mesh(comm::make_mpi_world(), 1, 2);
  test::GPTRunOptions o = options_for(Case{{.pp = 2, .dp = 1}});  // 5 layers
  o.engine.layout.stage_layers = {1, 3};
  EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig,
                                 {"--stage-layers 1,3 sums to 4 layers but the model has 5", "e.g. --stage-layers 3,2"}));
  o.engine.layout.stage_layers = {1, 1, 3};
  EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig,
                                 {"--stage-layers 1,1,3 gives 3 pipeline stages but the pipeline has 2 (--pp 2)"}));
}

// The interleaved schedule's limits are refused before any training, on every rank.
TEST(UnevenSplits, InterleavedOutsideItsLimitsFailsClearly) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  const data::TokenSplits data = test::pangram_text(61);
  test::GPTRunOptions o = options_for(
      Case{{.pp = 2, .dp = 1, .grad_accum = 3, .schedule = Schedule::kInterleaved, .virtual_stages = 2}});
  {
    comm::DeviceMesh mesh(comm::make_mpi_world(), 1, 2);
    EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig,
                                   {"--grad-accum 3 must be a multiple of 2 (e.g. 4)"}));
    o.engine.layout.grad_accum = 2;
    o.engine.layout.virtual_stages = 3;  // 6 virtual stages, 5 layers
    EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig,
                                   {"5 layers cannot fill 6 pipeline stages",
                                    "split into 6 virtual stages, --pp 2 x --virtual-stages 3"}));
    o.engine.layout.virtual_stages = 2;
    // --stage-layers counts the 4 virtual stages; a split the model refuses says so, with one that works.
    o.engine.layout.stage_layers = {1, 1, 1, 1};
    EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig,
                                   {"--stage-layers 1,1,1,1 sums to 4 layers but the model has 5",
                                    "e.g. --stage-layers 2,1,1,1", "the stages above are virtual stages",
                                    "--pp 2 x --virtual-stages 2"}));
    o.engine.layout.stage_layers = {2, 3};
    EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig,
                                   {"--stage-layers 2,3 gives 2 virtual stages but the interleaved pipeline has 4 "
                                    "virtual stages (--pp 2 x --virtual-stages 2)",
                                    "e.g. --stage-layers 2,1,1,1"}));
    o.engine.layout.stage_layers = {};
    o.engine.layout.zero = 3;
    EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig,
                                   {"--schedule interleaved with --zero 3 is not supported"}));
    o.engine.layout.zero = 0;
    o.engine.layout.schedule = Schedule::k1F1B;
    EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig,
                                   {"--virtual-stages 2: model chunks per pipeline rank are for --schedule interleaved"}));
  }
  comm::DeviceMesh dp_only(comm::make_mpi_world(), 1, 1);
  o.engine.layout = {.dp = 2, .micro_batch = 2, .grad_accum = 2, .schedule = Schedule::kInterleaved, .virtual_stages = 2};
  EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &dp_only); }, ErrorKind::kConfig,
                                 {"--schedule interleaved needs at least 2 pipeline ranks (--pp), got 1"}));
}

TEST(UnevenSplits, ShardGroupMustDivideDp) {
  if (test::world_size() != 4) GTEST_SKIP() << "runs with 4 processes";
  const data::TokenSplits data = test::pangram_text(61);
  test::GPTRunOptions o = options_for(Case{{.dp = 4, .zero = 3, .shard_group = 3}, true});
  comm::DeviceMesh mesh(comm::make_mpi_world(), 1, 1);
  EXPECT_TRUE(test::throws_error([&] { test::GPTEngine t(o, data, &mesh); }, ErrorKind::kConfig, {"--zero-shard-group 3 must divide the data-parallel size 4"}));
}

// A tp size that does not divide the key/value heads is refused before any
// training, on every rank, naming the value.
TEST(UnevenSplits, LlamaKvHeadsNotDivisibleByTpFailClearly) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  test::LlamaRunOptions o = llama_options_for(Case{{.tp = 2, .dp = 1}});
  o.model.n_kv_head = 1;  // multi-query: one key/value head cannot split over 2 ranks
  const data::TokenSplits data = test::pangram_text(o.model.vocab_size);
  comm::DeviceMesh mesh(comm::make_mpi_world(), 2, 1);
  EXPECT_TRUE(test::throws_error([&] { test::LlamaEngine e(o, data, &mesh); }, ErrorKind::kConfig,
                                 {"n_kv_head=1 does not split over --tp 2"}));
}

}  // namespace
}  // namespace ht::train
