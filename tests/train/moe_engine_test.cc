// A model of one's own with mixture-of-experts blocks (nn::MoE with its
// load-balancing and z-losses) trains alike on every layout: under data
// parallelism, ZeRO-3, tensor parallelism (the experts replicated),
// pipeline parallelism and expert parallelism (ep alone and with dp, tp,
// pp and ZeRO 1-3), the losses, gradient norms, final weights and
// validation loss equal one process's on the same micro-batches within 1e-5.
// The auxiliary losses are per micro-batch (Megatron-Core's), so the one
// process accumulates the same micro-batches the layout spreads over its
// replicas. The bundled Llama with mixture-of-experts blocks (--experts)
// does the same. A token-normalised loss beside them is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ht/comm/device_mesh.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/core/rng.h"
#include "ht/nn/embedding.h"
#include "ht/nn/functional.h"
#include "ht/nn/layer_norm.h"
#include "ht/nn/linear.h"
#include "ht/nn/model.h"
#include "ht/nn/moe.h"
#include "ht/parallel/tables.h"
#include "ht/train/engine.h"
#include "lm_engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

constexpr std::int64_t kVocab = 24, kLen = 8, kWidth = 16;
constexpr int kBlocks = 2;

// x + MoE(LayerNorm(x)).
class MoEBlock : public nn::Module {
 public:
  MoEBlock(const std::string& name, Device device, const nn::ExpertParallel& ep) : Module(name) {
    norm_ = &add_module(std::make_unique<nn::LayerNorm>("ln", kWidth, device));
    moe_ = &add_module(std::make_unique<nn::MoE>(
        "moe",
        nn::MoEOptions{
            .dim = kWidth, .hidden = 24, .experts = 4, .top_k = 2, .aux_loss_coeff = 0.05f, .z_loss_coeff = 0.01f},
        device, ep));
  }
  nn::Var compute(const nn::Var& x) override { return x + (*moe_)((*norm_)(x)); }

 private:
  nn::LayerNorm* norm_;
  nn::MoE* moe_;
};

// tokens (B, T) -> embeddings -> MoE blocks -> logits (B, T, V).
class Tagger : public nn::Model {
 public:
  Tagger(const nn::Placement& at, bool token_mean) : Model("moe_tagger", at), token_mean_(token_mean) {
    const auto [first, last] = parallel::stage_range(kBlocks, at.stage.rank, at.stage.size, at.stage.boundaries);
    if (first_stage()) embed_ = &add_built(std::make_unique<nn::Embedding>("embed", kVocab, kLen, kWidth, at.device));
    for (int b = first; b < last; ++b)
      blocks_.push_back(&add_built(std::make_unique<MoEBlock>("h." + std::to_string(b), at.device, at.ep)));
    if (last_stage()) head_ = &add_built(std::make_unique<nn::Linear>("head", kWidth, kVocab, true, at.device));
  }
  nn::Var compute(const nn::Var& x) override {
    nn::Var h = embed_ ? (*embed_)(x) : x;
    for (MoEBlock* block : blocks_) h = (*block)(h);
    return head_ ? (*head_)(h) : h;
  }
  nn::Loss loss(const nn::Var& logits, const Tensor& target) override {
    return token_mean_ ? nn::token_cross_entropy(logits, target) : nn::Loss(nn::cross_entropy(logits, target));
  }
  Shape stage_input_shape(const Shape& input) const override { return {input[0], input[1], kWidth}; }
  int num_layers() const override { return kBlocks; }
  std::string describe() const override { return "MoE tagger"; }

 private:
  bool token_mean_;
  nn::Embedding* embed_ = nullptr;
  std::vector<MoEBlock*> blocks_;
  nn::Linear* head_ = nullptr;
};

// Sample i: kLen tokens tagged (3 token + 1) mod V, all from (seed, i).
class Tags : public data::DataSource {
 public:
  void attach(const data::DataShard& shard) override { seed_ = shard.seed; }
  data::MicroBatch samples(std::int64_t first, std::int64_t count) override { return make(first, count, 1); }
  bool has_validation() const override { return true; }
  data::MicroBatch validation_samples(std::int64_t first, std::int64_t count) override {
    return make(first, count, 2);
  }

 private:
  data::MicroBatch make(std::int64_t first, std::int64_t count, std::uint64_t stream) const {
    std::vector<std::int32_t> tokens(std::size_t(count * kLen)), tags(tokens.size());
    for (std::int64_t r = 0; r < count; ++r) {
      Rng rng;
      rng.set_state(seed_ ^ (stream << 60), std::uint64_t(first + r) * 64);
      for (std::int64_t t = 0; t < kLen; ++t) {
        const std::size_t i = std::size_t(r * kLen + t);
        tokens[i] = std::int32_t(rng.uniform() * kVocab) % std::int32_t(kVocab);
        tags[i] = (3 * tokens[i] + 1) % std::int32_t(kVocab);
      }
    }
    return {.input = Tensor::from_vector(tokens, {count, kLen}), .target = Tensor::from_vector(tags, {count, kLen})};
  }
  std::uint64_t seed_ = 0;
};

struct Trained {
  std::vector<float> losses, norms;
  std::vector<std::vector<ExpertLoad>> experts;  // per step
  double val = 0;
  std::map<std::string, Tensor> weights;
};

EngineOptions options_for(const parallel::Layout& layout) {
  EngineOptions o;
  o.layout = layout;
  o.steps = 6;
  o.warmup_steps = 1;
  o.lr = 1e-2f;
  o.min_lr = 1e-3f;
  o.grad_clip = 1.f;
  o.eval_samples = 8;
  return o;
}

Trained train(const EngineOptions& options, comm::DeviceMesh* mesh) {
  Tags data;
  Engine engine(options, [&](const nn::Placement& at) { return std::make_unique<Tagger>(at, false); }, data, mesh);
  Trained r;
  for (int i = 0; i < options.steps; ++i) {
    const StepStats s = engine.step();
    r.losses.push_back(s.loss);
    r.norms.push_back(s.grad_norm);
    r.experts.push_back(s.experts);
  }
  r.val = engine.evaluate().loss;
  r.weights = engine.full_parameters();
  return r;
}

double worst_difference(const Trained& got, const Trained& want) {
  double worst = 0;
  const auto rel = test::relative_difference;
  // Every step's routing report: the same layers, the same token counts
  // (exact), the same auxiliary losses.
  EXPECT_EQ(got.experts.size(), want.experts.size());
  for (std::size_t i = 0; i < want.experts.size() && i < got.experts.size(); ++i) {
    EXPECT_EQ(got.experts[i].size(), want.experts[i].size()) << "step " << i + 1;
    for (std::size_t l = 0; l < want.experts[i].size() && l < got.experts[i].size(); ++l) {
      const ExpertLoad &a = got.experts[i][l], &b = want.experts[i][l];
      EXPECT_EQ(a.layer, b.layer);
      EXPECT_EQ(a.tokens, b.tokens) << a.layer << " at step " << i + 1;
      EXPECT_EQ(a.dropped, b.dropped) << a.layer << " at step " << i + 1;
      worst = std::max({worst, rel(a.aux_loss, b.aux_loss), rel(a.z_loss, b.z_loss)});
    }
  }
  for (std::size_t i = 0; i < want.losses.size(); ++i)
    worst = std::max({worst, rel(got.losses[i], want.losses[i]), rel(got.norms[i], want.norms[i])});
  worst = std::max(worst, rel(got.val, want.val));
  return std::max(worst, test::weights_difference(got.weights, want.weights));
}

class MoELayouts : public ::testing::TestWithParam<parallel::Layout> {};

/// `train` under `layout` against one process accumulating the same
/// micro-batches (or, `whole_batch`, taking the global batch as one);
/// returns the one-process run on rank 0 (empty elsewhere).
Trained compare_with_one_process(const parallel::Layout& layout, const char* model,
                                 Trained (*train)(const parallel::Layout&, comm::DeviceMesh*),
                                 bool whole_batch = false) {
  comm::DeviceMesh mesh(comm::make_mpi_world(), layout.tp, layout.pp, 1, layout.ep);
  Trained one;
  const std::int64_t k = layout.grad_accum * mesh.shape().dp_size();
  if (mesh.rank() == 0)
    one = train(whole_batch ? parallel::Layout{.micro_batch = layout.micro_batch * k}
                            : parallel::Layout{.micro_batch = layout.micro_batch, .grad_accum = k},
                nullptr);
  const Trained got = train(layout, &mesh);
  if (mesh.rank() != 0) return {};
  EXPECT_LT(one.losses.back(), one.losses.front()) << "the one-process run should learn";
  const double d = worst_difference(got, one);
  std::printf("%s %s: loss %.5f -> %.5f; worst relative difference %.2e\n", model, layout.name().c_str(),
              one.losses.front(), one.losses.back(), d);
  EXPECT_LE(d, 1e-5) << layout.name();
  return one;
}

Trained train_tagger(const parallel::Layout& layout, comm::DeviceMesh* mesh) { return train(options_for(layout), mesh); }

TEST_P(MoELayouts, EqualOneProcessOnTheSameMicroBatches) {
  const parallel::Layout layout = GetParam();
  if (test::world_size() != layout.world()) GTEST_SKIP() << layout.name() << " runs on " << layout.world();
  compare_with_one_process(layout, "MoE tagger", train_tagger);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MoELayouts,
    ::testing::Values(parallel::Layout{.dp = 2, .micro_batch = 3},
                      parallel::Layout{.dp = 2, .zero = 3, .micro_batch = 2, .grad_accum = 2},
                      parallel::Layout{.tp = 2, .dp = 1, .micro_batch = 3, .grad_accum = 2},
                      parallel::Layout{.pp = 2, .dp = 1, .micro_batch = 2, .grad_accum = 4},
                      // Expert parallelism: alone, under each ZeRO stage, and
                      // on 4 ranks with dp, tp and pp.
                      parallel::Layout{.dp = 2, .ep = 2, .micro_batch = 3},
                      parallel::Layout{.dp = 2, .ep = 2, .zero = 1, .micro_batch = 2, .grad_accum = 2},
                      parallel::Layout{.dp = 2, .ep = 2, .zero = 2, .micro_batch = 2, .grad_accum = 2},
                      parallel::Layout{.dp = 2, .ep = 2, .zero = 3, .micro_batch = 2, .grad_accum = 2},
                      parallel::Layout{.dp = 4, .ep = 2, .micro_batch = 2},
                      parallel::Layout{.dp = 4, .ep = 4, .zero = 3, .micro_batch = 1, .grad_accum = 2},
                      parallel::Layout{.dp = 4, .ep = 2, .zero = 3, .micro_batch = 2},
                      parallel::Layout{.tp = 2, .dp = 2, .ep = 2, .micro_batch = 2},
                      parallel::Layout{.pp = 2, .dp = 2, .ep = 2, .micro_batch = 1, .grad_accum = 4}),
    [](const ::testing::TestParamInfo<parallel::Layout>& info) { return info.param.name(); });

// The bundled Llama, every other block a mixture (4 experts, top 2, one
// shared), both auxiliary losses on.
Trained train_llama_with(const parallel::Layout& layout, comm::DeviceMesh* mesh, float capacity, float aux,
                         nn::Recompute recompute = nn::Recompute::kNone, float bias_rate = 0.f) {
  test::LlamaRunOptions o;
  o.model = {.vocab_size = 64, .context = 16, .n_layer = 2, .n_head = 2, .n_kv_head = 2, .n_embd = 16,
             .ffn_hidden = 24, .experts = 4, .top_k = 2, .shared_experts = 1, .moe_every = 1,
             .moe_aux_loss_coeff = aux, .moe_z_loss_coeff = aux / 5, .moe_capacity_factor = capacity,
             .moe_bias_update_rate = bias_rate};
  o.seq_len = 8;
  o.engine = options_for(layout);
  o.engine.lr = 3e-3f;
  o.engine.recompute = recompute;
  const data::TokenSplits splits = test::pangram_text(64);
  test::LlamaEngine e(o, splits, mesh);
  Trained r;
  for (int i = 0; i < o.engine.steps; ++i) {
    const StepStats s = e.engine.step();
    r.losses.push_back(s.loss);
    r.norms.push_back(s.grad_norm);
    r.experts.push_back(s.experts);
  }
  r.val = e.engine.evaluate().loss;
  r.weights = e.engine.full_parameters();
  return r;
}

Trained train_llama(const parallel::Layout& layout, comm::DeviceMesh* mesh) {
  return train_llama_with(layout, mesh, 0.f, 0.05f);
}

// A capacity of 0.5: each expert takes at most 2 of a sequence's 16
// choices. No auxiliary loss: it is per micro-batch, and this run is
// compared with one process taking the whole batch at once.
Trained train_llama_capacity(const parallel::Layout& layout, comm::DeviceMesh* mesh) {
  return train_llama_with(layout, mesh, 0.5f, 0.f);
}

// DeepSeek-V3's balancing, no auxiliary loss: every rank moves the bias by
// the step's loads over the whole batch, so each layout routes as one
// process does, step after step (a large rate, so the bias soon decides).
Trained train_llama_bias(const parallel::Layout& layout, comm::DeviceMesh* mesh) {
  return train_llama_with(layout, mesh, 0.f, 0.f, nn::Recompute::kNone, 0.05f);
}

TEST_P(MoELayouts, BiasBalancingRoutesAsOneProcess) {
  const parallel::Layout layout = GetParam();
  if (test::world_size() != layout.world()) GTEST_SKIP() << layout.name() << " runs on " << layout.world();
  const Trained one = compare_with_one_process(layout, "Llama E4k2 S1 bias0.05", train_llama_bias);
  if (one.experts.empty()) return;  // not rank 0
  const Trained plain = train_llama_with({.micro_batch = layout.micro_batch, .grad_accum = int(layout.grad_accum * layout.dp)},
                                         nullptr, 0.f, 0.f);
  bool routed_otherwise = false;
  for (std::size_t i = 0; i < one.experts.size(); ++i)
    routed_otherwise |= one.experts[i].front().tokens != plain.experts[i].front().tokens;
  EXPECT_TRUE(routed_otherwise) << "the bias never changed a choice: the test would not see a wrong one";
}

TEST_P(MoELayouts, TheBundledLlamaWithExpertsEqualsOneProcess) {
  const parallel::Layout layout = GetParam();
  if (test::world_size() != layout.world()) GTEST_SKIP() << layout.name() << " runs on " << layout.world();
  const Trained one = compare_with_one_process(layout, "Llama E4k2 S1", train_llama);
  if (one.experts.empty()) return;  // not rank 0
  // Both blocks report, each expert's tokens adding up to the step's
  // tokens (dp x micro-batch x accumulation x 8 positions) x top 2.
  ASSERT_EQ(one.experts.front().size(), 2u);
  EXPECT_EQ(one.experts.front()[1].layer, "layers.1.mlp");
  for (const ExpertLoad& l : one.experts.front()) {
    std::int64_t sum = 0;
    for (std::int64_t t : l.tokens) sum += t;
    EXPECT_EQ(sum, layout.dp * layout.micro_batch * layout.grad_accum * 8 * 2) << l.layer;
    EXPECT_GT(l.aux_loss, 0) << l.layer;
  }
}

// With a capacity the same choices drop under every layout, whatever the
// micro-batches (drops are per sequence): against one process taking the
// global batch as one micro-batch, the counts compared exactly step by
// step, and the run equal.
TEST_P(MoELayouts, TheSameChoicesDropUnderEveryLayout) {
  const parallel::Layout layout = GetParam();
  if (test::world_size() != layout.world()) GTEST_SKIP() << layout.name() << " runs on " << layout.world();
  const Trained one = compare_with_one_process(layout, "Llama E4k2 S1 cap0.5, one micro-batch", train_llama_capacity,
                                               /*whole_batch=*/true);
  if (one.experts.empty()) return;  // not rank 0
  std::int64_t dropped = 0;
  for (const std::vector<ExpertLoad>& step : one.experts)
    for (const ExpertLoad& l : step) dropped += l.dropped;
  EXPECT_GT(dropped, 0) << "a capacity of 0.5 drops choices";
}

// Full recomputation re-runs each MoE block's forward, all-to-alls
// included, before its backward: under ep2 with ZeRO-3 the run equals one
// process that keeps every activation, and the expert loads are counted once.
TEST(MoERecompute, FullRecomputationUnderEp2EqualsOneProcess) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs on 2";
  compare_with_one_process({.dp = 2, .ep = 2, .zero = 3, .micro_batch = 2, .grad_accum = 2},
                           "Llama E4k2 S1, full recomputation", [](const parallel::Layout& l, comm::DeviceMesh* mesh) {
                             return train_llama_with(l, mesh, 0.f, 0.05f,
                                                     mesh ? nn::Recompute::kFull : nn::Recompute::kNone);
                           });
}

// An ep2 ZeRO-3 checkpoint (experts saved by global index, each a quarter
// per rank of its expert-data-parallel pair) loads into ep1, ep4 and pp2
// bit for bit, and each continues the uninterrupted run's losses. No
// auxiliary loss: it is per micro-batch, and pp2 takes other micro-batches.
// The layers balance by DeepSeek-V3's bias, which the checkpoint carries
// (a resume that lost it would route otherwise).
class MoECheckpoint : public ::testing::TestWithParam<parallel::Layout> {};

TEST_P(MoECheckpoint, AnEp2Zero3CheckpointResumesUnderAnotherLayout) {
  const parallel::Layout saved_layout{.dp = 4, .ep = 2, .zero = 3, .micro_batch = 2};
  const parallel::Layout layout = GetParam();
  if (test::world_size() != 4) GTEST_SKIP() << "runs on 4";
  ASSERT_EQ(layout.global_batch(), saved_layout.global_batch());
  constexpr int kSaved = 3, kContinued = 3;
  std::unique_ptr<comm::Communicator> world = comm::make_mpi_world();
  const test::SharedTempDir dir(*world, "ht_moe_ckpt_" + layout.name());
  const auto engine_options = [&](const parallel::Layout& l) {
    EngineOptions o = options_for(l);
    o.ckpt_dir = dir.path();
    return o;
  };
  const auto run = [&](const parallel::Layout& l, bool resume, bool save, std::vector<float>& losses,
                       std::map<std::string, Tensor>& weights) {
    comm::DeviceMesh mesh(world->split(0, world->rank(), "moe_ckpt"), l.tp, l.pp, 1, l.ep);
    test::LlamaRunOptions o;
    o.model = {.vocab_size = 64, .context = 16, .n_layer = 2, .n_head = 2, .n_kv_head = 2, .n_embd = 16,
               .ffn_hidden = 24, .experts = 4, .top_k = 2, .shared_experts = 1, .moe_every = 1,
               .moe_aux_loss_coeff = 0.f, .moe_bias_update_rate = 0.05f};
    o.seq_len = 8;
    o.engine = engine_options(l);
    o.engine.resume = resume;
    const data::TokenSplits splits = test::pangram_text(64);
    test::LlamaEngine e(o, splits, &mesh);
    if (resume) {
      EXPECT_EQ(e.engine.resumed_from(), kSaved) << l.name() << " did not load the ep2 checkpoint";
      weights = e.engine.full_parameters();
    }
    for (int i = 0; i < (resume ? 0 : kSaved); ++i) e.engine.step();
    if (save) {
      weights = e.engine.full_parameters();
      EXPECT_EQ(e.engine.save_checkpoint(), "");
      EXPECT_EQ(e.engine.wait_for_checkpoint(), "");
    }
    for (int i = 0; i < kContinued; ++i) losses.push_back(e.engine.step().loss);
    mesh.finalize(std::chrono::seconds(60));
  };
  std::vector<float> want, got;
  std::map<std::string, Tensor> saved, loaded;
  run(saved_layout, false, true, want, saved);
  run(layout, true, false, got, loaded);
  if (world->rank() == 0) {
    ASSERT_EQ(loaded.size(), saved.size());
    for (int e = 0; e < 4; ++e)  // experts 2 and 3 come from the second rank of each ep pair
      EXPECT_TRUE(std::any_of(saved.begin(), saved.end(),
                              [&](const auto& kv) { return kv.first.find(fmt::format(".expert{}.", e)) != std::string::npos; }))
          << "no weights of expert " << e;
    for (const auto& [name, values] : saved) {
      ASSERT_TRUE(loaded.count(name)) << name << " missing after loading into " << layout.name();
      EXPECT_EQ(values.to_vector<float>(), loaded.at(name).to_vector<float>()) << name << " as loaded by " << layout.name();
    }
    for (int i = 0; i < kContinued; ++i)
      EXPECT_NEAR(got[std::size_t(i)], want[std::size_t(i)], 1e-5 * std::abs(want[std::size_t(i)]))
          << "step " << kSaved + i + 1 << " under " << layout.name();
    std::printf("ep2 zero3 checkpoint of step %d into %s: losses %.6f %.6f %.6f, uninterrupted %.6f %.6f %.6f\n",
                kSaved, layout.name().c_str(), got[0], got[1], got[2], want[0], want[1], want[2]);
  }
  world->barrier()->wait();
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MoECheckpoint,
    ::testing::Values(parallel::Layout{.dp = 4, .micro_batch = 2},
                      parallel::Layout{.dp = 4, .ep = 4, .zero = 1, .micro_batch = 2},
                      parallel::Layout{.pp = 2, .dp = 2, .micro_batch = 2, .grad_accum = 2}),
    [](const ::testing::TestParamInfo<parallel::Layout>& info) { return info.param.name(); });

TEST(MoELoss, ATokenNormalisedLossBesideAuxiliaryLossesIsRefused) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs on 2";
  comm::DeviceMesh mesh(comm::make_mpi_world(), 1, 2);
  Tags data;
  Engine engine(options_for({.pp = 2, .dp = 1, .micro_batch = 2, .grad_accum = 2}),
                [](const nn::Placement& at) { return std::make_unique<Tagger>(at, true); }, data, &mesh);
  EXPECT_TRUE(test::throws_error([&] { engine.step(); }, ErrorKind::kNotSupported,
                                 {"token-normalised sum", "auxiliary loss", "mean loss"}));
}

}  // namespace
}  // namespace ht::train
