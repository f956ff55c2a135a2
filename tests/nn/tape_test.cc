// Forward-only modules (Module::compute, nn/tape.h): their derived backward
// against hand-written twins (bit for bit where the sums run in the same
// order), every functional op and the modules built on the tape against
// finite differences (nn::check_gradients), recomputation, parameters read
// directly, dropout's keys, and the errors a module author meets.
#include <gtest/gtest.h>

#include <random>

#include "ht/nn/attention.h"
#include "ht/nn/block.h"
#include "ht/nn/dropout.h"
#include "ht/nn/encoder_block.h"
#include "ht/nn/functional.h"
#include "ht/nn/gradient_check.h"
#include "ht/nn/model.h"
#include "ht/nn/sequential.h"
#include "test_util.h"

namespace ht::nn {
namespace {

void fill_random(Module& m, std::mt19937& rng) {
  for (Parameter* p : m.parameters()) p->data().copy_from(test::random_tensor(p->data().shape(), rng, -0.5f, 0.5f));
}

/// Every parameter from its Init under `seed`.
void init_from(Module& m, std::uint64_t seed) {
  for (Parameter* p : m.parameters()) p->data().copy_from(p->initial_value(seed));
}

/// Copies `from`'s parameters into `to`'s of the same names.
void copy_parameters(Module& from, Module& to) {
  auto src = from.parameters(), dst = to.parameters();
  ASSERT_EQ(src.size(), dst.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(src[i]->name(), dst[i]->name());
    dst[i]->data().copy_from(src[i]->data());
  }
}

struct Grads {
  std::vector<float> dx, y;
  std::vector<std::vector<float>> params;
  bool operator==(const Grads&) const = default;
};

/// y = m(x), then backward with dy; every gradient, and the output.
Grads run_twin(Module& m, const Tensor& x, const Tensor& dy, Recompute recompute = Recompute::kNone) {
  m.set_recompute(recompute);
  m.zero_grad();
  Context ctx;
  Grads g;
  g.y = m.forward(ctx, x).to_vector<float>();
  const Tensor dx = m.backward(ctx, dy);
  if (dx.defined()) g.dx = dx.to_vector<float>();
  for (Parameter* p : m.parameters()) g.params.push_back(p->grad().to_vector<float>());
  EXPECT_EQ(ctx.saved_bytes(), 0) << "backward left saved tensors behind";
  return g;
}

// GPT's MLP, forward only: c_fc, GELU, c_proj.
class TapedMlp : public Module {
 public:
  TapedMlp(std::int64_t dim, std::int64_t hidden)
      : Module("mlp"),
        fc_(add_module(std::make_unique<Linear>("c_fc", dim, hidden, true, Device::cpu()))),
        proj_(add_module(std::make_unique<Linear>("c_proj", hidden, dim, true, Device::cpu()))) {}

 protected:
  Var compute(const Var& x) override { return proj_(gelu(fc_(x))); }

 private:
  Linear& fc_;
  Linear& proj_;
};

// nn::Block, forward only: the same children, the residual adds on the tape.
class TapedBlock : public Module {
 public:
  TapedBlock(std::int64_t dim, int heads)
      : Module("block"),
        ln_1_(add_module(std::make_unique<LayerNorm>("ln_1", dim, Device::cpu()))),
        attn_(add_module(std::make_unique<CausalSelfAttention>("attn", dim, heads, Device::cpu()))),
        ln_2_(add_module(std::make_unique<LayerNorm>("ln_2", dim, Device::cpu()))),
        mlp_(add_module(std::make_unique<MLP>("mlp", dim, 4 * dim, Device::cpu()))) {}

 protected:
  Var compute(const Var& x) override {
    const Var h = x + attn_(ln_1_(x));
    return h + mlp_(ln_2_(h));
  }

 private:
  LayerNorm& ln_1_;
  CausalSelfAttention& attn_;
  LayerNorm& ln_2_;
  MLP& mlp_;
};

// The derived backward sums what the hand-written one sums, in the same
// order (the MLP's fused GELU-and-bias gradient sums as bias_grad does; a
// residual's two gradients are added once, a + b = b + a), so the gradients
// are the same bits; with recomputation too.
TEST(Tape, ForwardOnlyTwinsEqualHandWrittenBackwardsBitForBit) {
  std::mt19937 rng(3);
  const Tensor x = test::random_tensor({2, 5, 16}, rng), dy = test::random_tensor({2, 5, 16}, rng);
  {
    MLP hand("mlp", 16, 64, Device::cpu());
    TapedMlp taped(16, 64);
    fill_random(hand, rng);
    copy_parameters(hand, taped);
    EXPECT_TRUE(run_twin(hand, x, dy) == run_twin(taped, x, dy)) << "MLP";
  }
  {
    Block hand("block", 16, 2, Device::cpu());
    TapedBlock taped(16, 2);
    fill_random(hand, rng);
    copy_parameters(hand, taped);
    const Grads want = run_twin(hand, x, dy);
    EXPECT_TRUE(want == run_twin(taped, x, dy)) << "Block";
    EXPECT_TRUE(want == run_twin(taped, x, dy, Recompute::kFull)) << "Block, recomputed whole";
    EXPECT_TRUE(want == run_twin(taped, x, dy, Recompute::kSelective)) << "Block, attention recomputed";
  }
}

// Each functional op's backward against finite differences, through a
// module that chains them.
class OpChain : public Module {
 public:
  OpChain() : Module("chain") {
    w_ = &add_parameter("w", {6, 4}, true, Device::cpu(), {}, Init::uniform(-0.5f, 0.5f));
    g_ = &add_parameter("g", {4}, false, Device::cpu(), {}, Init::uniform(0.5f, 1.5f));
    b_ = &add_parameter("b", {4}, false, Device::cpu(), {}, Init::uniform(-0.5f, 0.5f));
  }

 protected:
  // x (2, 3, 6): matmul, a broadcast gain and bias, a residual of silu and
  // gelu, a difference, a same-shape product, a scale, masked mean pooling,
  // a view, a sum and a mean, an index_select.
  Var compute(const Var& x) override {
    Tape& t = x.tape();
    const Var h = matmul(x, t.parameter(*w_)) * t.parameter(*g_) + t.parameter(*b_);  // (2, 3, 4)
    const Var a = silu(h) - gelu(h) * 0.5f;
    const Var m = a * h;
    const Var pooled = masked_mean(m + h, t.side_input("key_mask"));  // (2, 4)
    const Var flat = view(pooled, {8});
    const Var rows = index_select(m, 1, t.constant(Tensor::from_vector(std::vector<std::int32_t>{2, 0}, {2})));
    return view(sum(rows, 1) + mean(m, 1), {8}) * 2.f + flat;
  }

 private:
  Parameter* w_;
  Parameter* g_;
  Parameter* b_;
};

Tensor mask_2x3() { return Tensor::from_vector(std::vector<std::int32_t>{1, 1, 0, 1, 0, 0}, {2, 3}); }

TEST(Tape, EveryOpsGradientMatchesFiniteDifferences) {
  OpChain chain;
  init_from(chain, 5);
  std::mt19937 rng(4);
  GradientCheckOptions o;
  o.prepare = [](Context& ctx) { ctx.set_side_input("key_mask", mask_2x3()); };
  o.elements_per_tensor = 0;  // every element
  const GradientCheckResult r = check_gradients(chain, test::random_tensor({2, 3, 6}, rng), o);
  EXPECT_TRUE(r.ok) << r.report();
}

// The modules built on the tape: an encoder block with a padding mask and
// dropout off (evaluation), Sequential and Residual.
TEST(Tape, TapeModulesMatchFiniteDifferences) {
  std::mt19937 rng(6);
  GradientCheckOptions o;
  o.prepare = [](Context& ctx) { ctx.set_side_input("key_mask", mask_2x3()); };
  EncoderBlock block("block", {.dim = 8, .n_head = 2, .dropout = 0.2f}, Device::cpu());
  fill_random(block, rng);
  const GradientCheckResult rb = check_gradients(block, test::random_tensor({2, 3, 8}, rng), o);
  EXPECT_TRUE(rb.ok) << rb.report();

  Sequential seq("seq");
  seq.add(std::make_unique<Linear>("in", 8, 16, true, Device::cpu()));
  seq.add(std::make_unique<Residual>("res", std::make_unique<MLP>("mlp", 16, 32, Device::cpu())));
  seq.add(std::make_unique<LayerNorm>("ln", 16, Device::cpu()));
  fill_random(seq, rng);
  EXPECT_EQ(seq.parameters()[2]->name(), "res.mlp.c_fc.weight");
  const GradientCheckResult rs = check_gradients(seq, test::random_tensor({3, 8}, rng), {});
  EXPECT_TRUE(rs.ok) << rs.report();
}

// A parameter read on the tape gets its gradient added and is marked ready
// once per backward, also when no gradient reaches it; a child whose output
// is unused still runs its backward (with zeros), so its hooks fire too.
class UnusedPaths : public Module {
 public:
  UnusedPaths() : Module("unused") {
    used_ = &add_parameter("used", {3}, false, Device::cpu(), {}, Init::constant(2.f));
    unused_ = &add_parameter("unused", {3}, false, Device::cpu(), {}, Init::constant(1.f));
    child_ = &add_module(std::make_unique<Linear>("child", 3, 3, true, Device::cpu()));
  }
  Parameter* used_;
  Parameter* unused_;
  Linear* child_;

 protected:
  Var compute(const Var& x) override {
    (void)x.tape().parameter(*unused_);
    (void)(*child_)(x);
    return x * x.tape().parameter(*used_);
  }
};

TEST(Tape, EveryParameterIsMarkedReadyOncePerBackward) {
  UnusedPaths m;
  init_from(m, 1);
  std::map<std::string, int> ready;
  for (Parameter* p : m.parameters()) p->set_grad_ready_hook([&](Parameter& q) { ++ready[q.name()]; });
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  m.zero_grad();
  for (int pass = 0; pass < 2; ++pass) {
    Context ctx;
    m.forward(ctx, x);
    const Tensor dx = m.backward(ctx, Tensor::from_vector(std::vector<float>{1, 1, 1, 1, 1, 1}, {2, 3}));
    EXPECT_EQ(dx.to_vector<float>(), std::vector<float>(6, 2.f));
  }
  for (const char* name : {"used", "unused", "child.weight", "child.bias"}) EXPECT_EQ(ready[name], 2) << name;
  EXPECT_EQ(m.used_->grad().to_vector<float>(), (std::vector<float>{10, 14, 18})) << "two passes of x's column sums";
  EXPECT_EQ(m.unused_->grad().to_vector<float>(), std::vector<float>(3, 0.f));
  EXPECT_EQ(m.child_->weight().grad().to_vector<float>(), std::vector<float>(9, 0.f));
}

// An identity module returns a gradient of its own: writing into it must
// not write into the caller's dy.
class Identity : public Module {
 public:
  Identity() : Module("id") {}

 protected:
  Var compute(const Var& x) override { return x; }
};

TEST(Tape, TheInputsGradientIsNeverTheCallersDy) {
  Identity id;
  Context ctx;
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  id.forward(ctx, x);
  const Tensor dy = Tensor::from_vector(std::vector<float>{3, 4}, {2});
  Tensor dx = id.backward(ctx, dy);
  dx.fill_(0.f);
  EXPECT_EQ(dy.to_vector<float>(), (std::vector<float>{3, 4}));
}

// Dropout draws from (seed, module path, sample, element) alone: the same
// elements drop whether two samples come in one micro-batch or two, and in
// a recomputed forward; evaluation is the identity; backward applies the
// forward's mask.
TEST(Dropout, KeyedBySampleNotByBatch) {
  Sequential seq("seq");
  seq.add(std::make_unique<Dropout>("drop", 0.5f));
  std::mt19937 rng(8);
  const Tensor x = test::random_tensor({4, 64}, rng, 1.f, 2.f);
  auto forward = [&](const Tensor& in, std::int64_t first, bool training) {
    Context ctx;
    ctx.set_batch({.training = training, .seed = 11, .first_sample = first});
    const Tensor y = seq.forward(ctx, in);
    const Tensor dx = seq.backward(ctx, Tensor::from_vector(std::vector<float>(std::size_t(in.numel()), 1.f), in.shape()));
    return std::make_pair(y.to_vector<float>(), dx.to_vector<float>());
  };
  const auto [whole, dwhole] = forward(x, 10, true);
  auto [a, da] = forward(x.slice(0, 2).clone(), 10, true);
  const auto [b, db] = forward(x.slice(2, 4).clone(), 12, true);
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_EQ(a, whole);
  int dropped = 0;
  const std::vector<float> xv = x.to_vector<float>();
  for (std::size_t i = 0; i < whole.size(); ++i) {
    if (whole[i] == 0.f) {
      ++dropped;
      EXPECT_EQ(dwhole[i], 0.f);
    } else {
      EXPECT_FLOAT_EQ(whole[i], 2.f * xv[i]);
      EXPECT_FLOAT_EQ(dwhole[i], 2.f);
    }
  }
  EXPECT_GT(dropped, 80);
  EXPECT_LT(dropped, 176);
  EXPECT_NE(forward(x, 11, true).first, whole) << "other samples, other elements";
  EXPECT_EQ(forward(x, 10, false).first, xv) << "evaluation keeps everything";
  seq.set_recompute(Recompute::kFull);
  EXPECT_EQ(forward(x, 10, true), std::make_pair(whole, dwhole)) << "a recomputed forward drops the same";
  EXPECT_TRUE(test::throws_error([] { Dropout("d", 1.f); }, ErrorKind::kConfig, {"'d'", "[0, 1)"}));
}

// What a module author meets, said by name.
class Silent : public Module {
 public:
  Silent() : Module("silent") {}
};
class ForwardOnlyHalf : public Module {
 public:
  ForwardOnlyHalf() : Module("half") {}

 protected:
  Tensor forward_impl(Context&, const Tensor& x) override { return x; }
};
class SetsASideInput : public Module {
 public:
  SetsASideInput() : Module("setter") {}

 protected:
  Var compute(const Var& x) override {
    x.tape().context().set_side_input("key_mask", x.tensor());
    return x;
  }
};

TEST(Tape, MistakesAreNamed) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  Context ctx;
  Silent silent;
  EXPECT_TRUE(test::throws_error([&] { silent.forward(ctx, x); }, ErrorKind::kNotSupported,
                                 {"'silent'", "compute(", "forward_impl"}));
  ForwardOnlyHalf half;
  half.forward(ctx, x);
  EXPECT_TRUE(test::throws_error([&] { half.backward(ctx, x); }, ErrorKind::kInvalidArgument,
                                 {"'half'", "backward_impl"}));
  OpChain chain;
  init_from(chain, 1);
  Context no_mask;
  std::mt19937 rng(1);
  const Tensor x3 = test::random_tensor({2, 3, 6}, rng);
  EXPECT_TRUE(test::throws_error([&] { chain.forward(no_mask, x3); },
                                 ErrorKind::kInvalidArgument, {"'key_mask'", "MicroBatch::side"}));
  SetsASideInput setter;
  Context sealed;
  sealed.seal_side_inputs();
  EXPECT_TRUE(test::throws_error([&] { setter.forward(sealed, x); }, ErrorKind::kConfig,
                                 {"'key_mask'", "MicroBatch::side", "every stage"}));
}

// A model whose loss() gives what the caller asks of it: a sum over a count
// of -1, or a loss that is not a scalar.
class BadLoss : public Model {
 public:
  enum class What { kNegativeCount, kNotAScalar };
  explicit BadLoss(What what) : Model("bad_loss", Placement{}), what_(what) {}
  Var compute(const Var& x) override { return x; }
  Loss loss(const Var& y, const Tensor&) override {
    return what_ == What::kNegativeCount ? Loss::sum(sum(y, 0), -1.0) : Loss(y);
  }
  std::string describe() const override { return "bad loss"; }

 private:
  What what_;
};

TEST(Loss, MistakesAreNamed) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  const Tensor target = Tensor::from_vector(std::vector<std::int32_t>{0, 1, 2}, {3});
  BadLoss negative(BadLoss::What::kNegativeCount), not_scalar(BadLoss::What::kNotAScalar);
  Context c1, c2;
  EXPECT_TRUE(test::throws_error([&] { negative.forward_loss(c1, x, target); }, ErrorKind::kInvalidArgument,
                                 {"a count of -1", ">= 0"}));
  EXPECT_TRUE(test::throws_error([&] { not_scalar.forward_loss(c2, x, target); }, ErrorKind::kInvalidArgument,
                                 {"f32 scalar", "[3]"}));
  EXPECT_TRUE(test::throws_error([&] { count_targets(x, -100); }, ErrorKind::kDTypeMismatch, {"count_targets"}));
  Context ctx;
  Tape tape(ctx);
  const Var v = tape.input(x);
  EXPECT_TRUE(test::throws_error([&] { split(v, {1, 1}, 0); }, ErrorKind::kShapeMismatch,
                                 {"split: sizes 1, 1 add up to 2", "has 3 along dim 0"}));
}

}  // namespace
}  // namespace ht::nn
