// A token-normalised loss trains alike on every layout: a tagger of one's
// own (not a bundled model: embeddings, residual MLP blocks, logits per
// position) whose samples have variable-length targets (padding ignored)
// gives, under data parallelism, accumulation, ZeRO-3, tensor and pipeline
// parallelism, the losses, gradient norms, final weights, validation loss
// and token accuracy of one process on the whole batch at once, within 1e-5.
// The same model with a mean-of-micro-batch-means loss does not (the
// comparison would see the layout), which the test shows too.
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
#include "ht/nn/mlp.h"
#include "ht/nn/model.h"
#include "ht/nn/sequential.h"
#include "ht/parallel/tables.h"
#include "ht/train/engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

constexpr std::int64_t kVocab = 24, kLen = 12, kWidth = 32;
constexpr int kBlocks = 2;
constexpr std::int32_t kPad = -100;

// tokens (B, T) -> embeddings -> blocks x (x + MLP(LayerNorm(x))) -> logits (B, T, V).
class Tagger : public nn::Model {
 public:
  /// `repeat`: how often the first block runs per forward (weights shared);
  /// `declare`: its parameters say so (Parameter::set_uses).
  Tagger(const nn::Placement& at, bool token_mean, int repeat = 1, bool declare = false)
      : Model("tagger", at), token_mean_(token_mean), repeat_(repeat) {
    const auto [first, last] = parallel::stage_range(kBlocks, at.stage.rank, at.stage.size, at.stage.boundaries);
    if (first_stage()) embed_ = &add_built(std::make_unique<nn::Embedding>("embed", kVocab, kLen, kWidth, at.device));
    for (int b = first; b < last; ++b) {
      auto block = std::make_unique<nn::Sequential>("mlp_norm");
      block->add(std::make_unique<nn::LayerNorm>("ln", kWidth, at.device));
      block->add(std::make_unique<nn::MLP>("mlp", kWidth, 2 * kWidth, at.device, at.tp));
      blocks_.push_back(&add_built(std::make_unique<nn::Residual>("h." + std::to_string(b), std::move(block))));
    }
    if (last_stage()) head_ = &add_built(std::make_unique<nn::Linear>("head", kWidth, kVocab, true, at.device));
    if (declare)
      for (nn::Parameter* p : blocks_.front()->parameters()) p->set_uses(repeat);
  }
  nn::Var compute(const nn::Var& x) override {
    nn::Var h = embed_ ? (*embed_)(x) : x;
    for (int r = 1; r < repeat_; ++r) h = (*blocks_.front())(h);
    for (nn::Residual* block : blocks_) h = (*block)(h);
    return head_ ? (*head_)(h) : h;
  }
  nn::Loss loss(const nn::Var& logits, const Tensor& target) override {
    const nn::CrossEntropyOptions o{.ignore_index = kPad};
    return token_mean_ ? nn::token_cross_entropy(logits, target, o) : nn::Loss(nn::cross_entropy(logits, target, o));
  }
  std::vector<std::string> metric_names() const override { return {"token_accuracy"}; }
  void add_metrics(nn::Context& ctx, const Tensor& logits, const Tensor& target) const override {
    const std::vector<float> l = logits.to(Device::cpu()).to_vector<float>();
    const std::vector<std::int32_t> t = target.to(Device::cpu()).to_vector<std::int32_t>();
    double correct = 0, counted = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (t[i] == kPad) continue;
      const float* row = l.data() + i * kVocab;
      correct += std::max_element(row, row + kVocab) - row == t[i];
      ++counted;
    }
    ctx.add_metric("token_accuracy", correct, counted);
  }
  Shape stage_input_shape(const Shape& input) const override { return {input[0], input[1], kWidth}; }
  int num_layers() const override { return kBlocks; }
  std::string describe() const override { return token_mean_ ? "Tagger token mean" : "Tagger mean of means"; }

 private:
  bool token_mean_;
  int repeat_;
  nn::Embedding* embed_ = nullptr;
  std::vector<nn::Residual*> blocks_;
  nn::Linear* head_ = nullptr;
};

// Sample i: kLen tokens, the first 1..kLen of them tagged (3 token + 1) mod
// V, the rest padding; all from (seed, i).
class VariableLengthTags : public data::DataSource {
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
      const std::int64_t length = 1 + std::int64_t(rng.uniform() * kLen) % kLen;
      for (std::int64_t t = 0; t < kLen; ++t) {
        const std::size_t i = std::size_t(r * kLen + t);
        tokens[i] = std::int32_t(rng.uniform() * kVocab) % std::int32_t(kVocab);
        tags[i] = t < length ? (3 * tokens[i] + 1) % std::int32_t(kVocab) : kPad;
      }
    }
    return {.input = Tensor::from_vector(tokens, {count, kLen}), .target = Tensor::from_vector(tags, {count, kLen})};
  }
  std::uint64_t seed_ = 0;
};

struct Run {
  std::vector<float> losses, norms;
  double val = 0, accuracy = 0;
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
  o.eval_samples = 12;
  return o;
}

Run train(const EngineOptions& options, bool token_mean, comm::DeviceMesh* mesh, int repeat = 1, bool declare = false) {
  VariableLengthTags data;
  Engine engine(
      options, [&](const nn::Placement& at) { return std::make_unique<Tagger>(at, token_mean, repeat, declare); },
      data, mesh);
  Run r;
  for (int i = 0; i < options.steps; ++i) {
    const StepStats s = engine.step();
    r.losses.push_back(s.loss);
    r.norms.push_back(s.grad_norm);
  }
  const EvalStats e = engine.evaluate();
  r.val = e.loss;
  r.accuracy = e.metrics.at("token_accuracy");
  r.weights = engine.full_parameters();
  return r;
}

/// The largest relative difference of the runs' losses, norms and
/// validation, and of the whole model's final weights.
double worst_difference(const Run& got, const Run& want) {
  double worst = 0;
  const auto rel = test::relative_difference;
  for (std::size_t i = 0; i < want.losses.size(); ++i)
    worst = std::max({worst, rel(got.losses[i], want.losses[i]), rel(got.norms[i], want.norms[i])});
  worst = std::max({worst, rel(got.val, want.val), rel(got.accuracy, want.accuracy)});
  return std::max(worst, test::weights_difference(got.weights, want.weights));
}

/// `layout` on the world against one process on the whole global batch in
/// one micro-batch; returns the worst difference on rank 0, -1 elsewhere.
double difference_from_one_process(const parallel::Layout& layout, bool token_mean, int repeat = 1) {
  comm::DeviceMesh mesh(comm::make_mpi_world(), layout.tp, layout.pp);
  const EngineOptions options = options_for(layout);
  Run one;
  if (mesh.rank() == 0) {
    const std::int64_t global = layout.micro_batch * mesh.shape().dp_size() * layout.grad_accum;
    one = train(options_for({.micro_batch = global}), token_mean, nullptr, repeat, true);
  }
  const Run got = train(options, token_mean, &mesh, repeat, true);
  if (mesh.rank() != 0) return -1;
  EXPECT_LT(one.losses.back(), one.losses.front()) << "the one-process run should learn";
  const double d = worst_difference(got, one);
  std::printf("%s %s: loss %.5f -> %.5f, token accuracy %.3f; worst relative difference %.2e\n",
              layout.name().c_str(), token_mean ? "token mean" : "mean of means", one.losses.front(),
              one.losses.back(), one.accuracy, d);
  return d;
}

class TokenLoss : public ::testing::TestWithParam<parallel::Layout> {};

TEST_P(TokenLoss, EveryLayoutMatchesOneProcess) {
  const parallel::Layout layout = GetParam();
  if (test::world_size() != layout.world()) GTEST_SKIP() << layout.name() << " runs on " << layout.world();
  EXPECT_LE(difference_from_one_process(layout, /*token_mean=*/true), 1e-5) << layout.name();
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TokenLoss,
    ::testing::Values(parallel::Layout{.dp = 2, .micro_batch = 3},
                      parallel::Layout{.dp = 2, .micro_batch = 2, .grad_accum = 3},
                      parallel::Layout{.dp = 2, .zero = 3, .micro_batch = 3, .grad_accum = 2},
                      parallel::Layout{.tp = 2, .dp = 1, .micro_batch = 3, .grad_accum = 2},
                      parallel::Layout{.pp = 2, .dp = 1, .micro_batch = 2, .grad_accum = 4},
                      parallel::Layout{.dp = 4, .micro_batch = 2},
                      parallel::Layout{.pp = 2, .dp = 2, .zero = 1, .micro_batch = 2, .grad_accum = 2},
                      parallel::Layout{.tp = 2, .dp = 2, .micro_batch = 2, .grad_accum = 2}),
    [](const ::testing::TestParamInfo<parallel::Layout>& info) { return info.param.name(); });

// The control: with a mean of micro-batch means the same comparison sees
// the layout (the samples' lengths differ), so the test above could fail.
TEST(TokenLoss, AMeanOfMeansDependsOnTheLayout) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs on 2";
  const double d = difference_from_one_process({.dp = 2, .micro_batch = 2, .grad_accum = 3}, /*token_mean=*/false);
  if (d >= 0) EXPECT_GT(d, 1e-3);
}

// A module called twice in one forward (weights shared) whose parameters
// say so (set_uses(2)) trains alike on every layout; one that does not is
// refused by name on every rank, before its gradient reduced after the
// first call's contribution is applied.
TEST(SharedModule, CalledTwiceAndDeclaredTrainsAlike) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs on 2";
  for (const parallel::Layout& l : {parallel::Layout{.dp = 2, .micro_batch = 3},
                                    parallel::Layout{.dp = 2, .zero = 3, .micro_batch = 3, .grad_accum = 2}})
    EXPECT_LE(difference_from_one_process(l, /*token_mean=*/true, /*repeat=*/2), 1e-5) << l.name();
}

TEST(SharedModule, CalledTwiceUndeclaredIsRefusedByName) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs on 2";
  comm::DeviceMesh mesh(comm::make_mpi_world(), 1, 1);
  VariableLengthTags data;
  Engine engine(options_for({.dp = 2, .micro_batch = 2, .grad_accum = 2}),
                [](const nn::Placement& at) { return std::make_unique<Tagger>(at, true, 2, false); }, data, &mesh);
  EXPECT_TRUE(test::throws_error([&] { engine.step(); }, ErrorKind::kNotSupported,
                                 {"parameter 'h.0.", "read by 2 forwards of its module per micro-batch",
                                  "set_uses(2)"}));
}

// A step whose targets are all ignored counts no token: it is skipped (no
// update: the weights stay as they were) and reports its loss as NaN, not
// a number made up of a division by zero.
class AllIgnored : public VariableLengthTags {
 public:
  data::MicroBatch samples(std::int64_t first, std::int64_t count) override {
    data::MicroBatch b = VariableLengthTags::samples(first, count);
    b.target = Tensor::from_vector(std::vector<std::int32_t>(std::size_t(b.target.numel()), kPad), b.target.shape());
    return b;
  }
};

TEST(TokenLoss, AStepThatCountsNoTokenIsSkipped) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs on 2 (one process each)";
  AllIgnored data;
  Engine engine(options_for({.micro_batch = 2, .grad_accum = 2}),
                [](const nn::Placement& at) { return std::make_unique<Tagger>(at, true); }, data, nullptr);
  const std::map<std::string, Tensor> before = engine.full_parameters();
  const StepStats s = engine.step();
  EXPECT_TRUE(s.skipped);
  EXPECT_TRUE(std::isnan(s.loss)) << s.loss;
  for (const auto& [name, w] : engine.full_parameters())
    EXPECT_EQ(w.to_vector<float>(), before.at(name).to_vector<float>()) << name;
}

}  // namespace
}  // namespace ht::train
