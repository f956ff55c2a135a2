// nn::check_gradients (ht/nn/gradient_check.h): passes on the bundled layers
// (a padding mask given through prepare), on a model's loss, and fails,
// naming the parameter, on modules and a model whose backward is wrong.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "ht/models/gpt.h"
#include "ht/nn/gradient_check.h"
#include "ht/nn/layer_norm.h"
#include "ht/nn/mlp.h"
#include "ht/nn/model.h"
#include "ht/nn/self_attention.h"
#include "test_util.h"

namespace ht::nn::gradient_check_test {
namespace {

// Every parameter of `m` uniform in [-scale, scale], norm gains around 1.
void randomize(Module& m, std::mt19937& rng, float scale = 0.5f) {
  for (Parameter* p : m.parameters()) {
    const bool gain = p->name().find("ln") != std::string::npos && p->name().find("weight") != std::string::npos;
    p->data().copy_from(
        test::random_tensor(p->data().shape(), rng, gain ? 1.f - scale : -scale, gain ? 1.f + scale : scale));
  }
}

// The bytes of every parameter's values, to see that the check restores them.
std::vector<std::vector<char>> snapshot(Module& m) {
  std::vector<std::vector<char>> out;
  for (Parameter* p : m.parameters()) {
    const char* b = static_cast<const char*>(p->data().data_ptr());
    out.emplace_back(b, b + p->data().nbytes());
  }
  return out;
}

const TensorGradientCheck& find(const GradientCheckResult& r, const std::string& name) {
  for (const TensorGradientCheck& c : r.tensors)
    if (c.name == name) return c;
  throw std::runtime_error("no tensor " + name + " in the result");
}

// Every tensor of a passing check was compared at min(numel, k) elements.
void expect_probed(const GradientCheckResult& r, std::int64_t k) {
  for (const TensorGradientCheck& c : r.tensors) {
    EXPECT_EQ(c.probed, std::min(c.numel, k)) << c.name;
    EXPECT_TRUE(c.problem.empty()) << c.name << ": " << c.problem;
  }
}

TEST(GradientCheck, LinearPassesAndItsValuesAreRestoredExactly) {
  std::mt19937 rng(1);
  Linear fc("fc", 6, 5, true, Device::cpu());
  randomize(fc, rng);
  const Tensor x = test::random_tensor({3, 6}, rng);
  const std::vector<float> x_before = x.to_vector<float>();
  const auto before = snapshot(fc);
  const GradientCheckResult r = check_gradients(fc, x);
  EXPECT_TRUE(r.ok) << r.report();
  ASSERT_EQ(r.tensors.size(), 3u);
  EXPECT_EQ(r.tensors[0].name, "input");
  EXPECT_EQ(r.tensors[1].name, "weight");  // a root module's parameters carry no prefix
  EXPECT_EQ(r.tensors[2].name, "bias");
  expect_probed(r, 16);
  EXPECT_EQ(find(r, "bias").probed, 5) << "a tensor smaller than elements_per_tensor is probed whole";
  EXPECT_EQ(snapshot(fc), before) << "every perturbed parameter value written back bit for bit";
  EXPECT_EQ(x.to_vector<float>(), x_before) << "the caller's input is never written";
  EXPECT_NE(r.report().find("gradient check passed"), std::string::npos) << r.report();

  // Every element, and the same seed probes the same elements with the same verdict.
  GradientCheckOptions all;
  all.elements_per_tensor = 0;
  const GradientCheckResult whole = check_gradients(fc, x, all);
  EXPECT_TRUE(whole.ok) << whole.report();
  EXPECT_EQ(find(whole, "weight").probed, 30);
  const GradientCheckResult again = check_gradients(fc, x);
  for (std::size_t i = 0; i < r.tensors.size(); ++i) {
    EXPECT_EQ(again.tensors[i].worst_index, r.tensors[i].worst_index);
    EXPECT_EQ(again.tensors[i].max_abs_error, r.tensors[i].max_abs_error);
  }
  EXPECT_EQ(snapshot(fc), before);
}

TEST(GradientCheck, LayerNormPasses) {
  std::mt19937 rng(2);
  LayerNorm ln("ln", 8, Device::cpu());
  randomize(ln, rng, 0.3f);
  const GradientCheckResult r = check_gradients(ln, test::random_tensor({4, 8}, rng));
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(r.tensors.size(), 3u);  // input, weight, bias
  expect_probed(r, 16);
}

TEST(GradientCheck, MLPPasses) {
  std::mt19937 rng(3);
  MLP mlp("mlp", 8, 16, Device::cpu());
  randomize(mlp, rng, 0.4f);
  const GradientCheckResult r = check_gradients(mlp, test::random_tensor({2, 3, 8}, rng));
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(r.tensors.size(), 5u);  // input, c_fc and c_proj weight and bias
  expect_probed(r, 16);
}

// An encoder's attention: no causal mask, padded keys masked through the
// "key_mask" side input that prepare sets on every Context.
TEST(GradientCheck, SelfAttentionWithAKeyMaskPasses) {
  std::mt19937 rng(4);
  AttentionConfig config;
  config.dim = 8, config.n_head = 2, config.causal = false, config.bias = true;
  SelfAttention attn("attn", config, Device::cpu());
  randomize(attn, rng, 0.5f);
  const Tensor x = test::random_tensor({2, 5, 8}, rng);
  // Row 1's last two keys are padding.
  const Tensor mask = Tensor::from_vector<std::int32_t>({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 5});
  GradientCheckOptions o;
  o.prepare = [&](Context& ctx) { ctx.set_side_input("key_mask", mask); };
  const auto before = snapshot(attn);
  const GradientCheckResult r = check_gradients(attn, x, o);
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(r.tensors.size(), 9u);  // input, then q, k, v, o weight and bias
  expect_probed(r, 16);
  EXPECT_EQ(snapshot(attn), before);
  // The mask reached the forwards: without it the scalar differs.
  const GradientCheckResult unmasked = check_gradients(attn, x);
  EXPECT_TRUE(unmasked.ok) << unmasked.report();
  EXPECT_NE(unmasked.scalar, r.scalar);
}

// y = 2 w * x per feature, whose hand-written backward forgets the 2 in the
// weight's gradient (the input's is right).
class ForgetsAFactor : public Module {
 public:
  explicit ForgetsAFactor(std::int64_t dim) : Module("scale") {
    weight_ = &add_parameter("weight", {dim}, false, Device::cpu(), {}, Init::uniform(0.5f, 1.5f));
    weight_->data().copy_from(weight_->initial_value(7));
  }

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& x) override {
    ctx.save(this, {x});
    Tensor y = Tensor::empty(x.shape(), DType::kF32);
    const std::int64_t c = x.size(-1);
    const float* xv = x.data<float>();
    const float* w = weight_->data().data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = 2.f * w[i % c] * xv[i];
    return y;
  }
  Tensor backward_impl(Context& ctx, const Tensor& dy) override {
    const Tensor x = ctx.saved(this).at(0);  // Module::backward pops it after
    const std::int64_t c = x.size(-1);
    Tensor dx = Tensor::empty(x.shape(), DType::kF32);
    const float* w = weight_->data().data<float>();
    weight_->allocate_grad();
    float* dw = weight_->grad().data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      dx.data<float>()[i] = 2.f * w[i % c] * dy.data<float>()[i];
      dw[i % c] += dy.data<float>()[i] * x.data<float>()[i];  // wrong: the 2 is missing
    }
    weight_->mark_grad_ready();
    return dx;
  }

 private:
  Parameter* weight_;
};

// A user's network, a Linear then the faulty layer: the check must fail and
// name the faulty layer's weight alone, the others' gradients being right.
class Net : public Module {
 public:
  Net() : Module("net") {
    fc_ = &add_module(std::make_unique<Linear>("fc", 4, 4, true, Device::cpu()));
    scale_ = &add_module(std::make_unique<ForgetsAFactor>(4));
  }

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& x) override { return scale_->forward(ctx, fc_->forward(ctx, x)); }
  Tensor backward_impl(Context& ctx, const Tensor& dy) override { return fc_->backward(ctx, scale_->backward(ctx, dy)); }

 private:
  Linear* fc_;
  ForgetsAFactor* scale_;
};

TEST(GradientCheck, AWrongBackwardFailsNamingTheParameter) {
  std::mt19937 rng(5);
  Net net;
  for (Parameter* p : net.parameters())
    if (p->name().rfind("fc.", 0) == 0) p->data().copy_from(test::random_tensor(p->data().shape(), rng));
  const auto before = snapshot(net);
  const GradientCheckResult r = check_gradients(net, test::random_tensor({3, 4}, rng));
  EXPECT_FALSE(r.ok) << r.report();
  EXPECT_EQ(snapshot(net), before) << "restored on failure too";
  for (const char* right : {"input", "fc.weight", "fc.bias"}) EXPECT_TRUE(find(r, right).ok) << right << r.report();
  const TensorGradientCheck& w = find(r, "scale.weight");
  EXPECT_FALSE(w.ok);
  EXPECT_EQ(w.probed, 4);
  EXPECT_GT(w.worst_ratio, 1.0);
  EXPECT_NEAR(w.worst_analytic, 0.5 * w.worst_numeric, 1e-3 * std::abs(w.worst_numeric) + 1e-4)
      << "half the gradient: the missing factor 2";
  EXPECT_NEAR(w.max_rel_error, 0.5, 1e-2);
  const std::string report = r.report();
  EXPECT_NE(report.find("gradient check FAILED: 1 of 4 tensors"), std::string::npos) << report;
  EXPECT_EQ(report.find("  scale.weight: "), report.find('\n') + 1) << "the offender first: " << report;
  std::printf("%s", report.c_str());  // what a user sees
}

// A backward that returns no input gradient breaks a module's contract.
class DropsTheInputGradient : public Linear {
 public:
  DropsTheInputGradient() : Linear("fc", 3, 2, false, Device::cpu()) {}

 protected:
  Tensor backward_impl(Context& ctx, const Tensor& dy) override {
    Linear::backward_impl(ctx, dy);
    return Tensor();
  }
};

TEST(GradientCheck, AMissingInputGradientFailsUnlessNotAsked) {
  std::mt19937 rng(6);
  DropsTheInputGradient m;
  randomize(m, rng);
  const Tensor x = test::random_tensor({2, 3}, rng);
  const GradientCheckResult r = check_gradients(m, x);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(find(r, "input").problem.find("no gradient for the f32 input"), std::string::npos) << r.report();
  EXPECT_TRUE(find(r, "weight").ok) << r.report();
  GradientCheckOptions o;
  o.check_input = false;
  const GradientCheckResult params_only = check_gradients(m, x, o);
  EXPECT_TRUE(params_only.ok) << params_only.report();
  EXPECT_EQ(params_only.tensors.size(), 1u);
}

// A user's regression model: one Linear and a mean squared error written by
// hand, with the loss gradient's factor 2 right or forgotten.
class Regression : public Model {
 public:
  explicit Regression(bool forget_the_2) : Model("regression", Placement{}), forget_(forget_the_2) {
    fc_ = &add_module(std::make_unique<Linear>("fc", 4, 2, true, Device::cpu()));
  }
  LossValue forward_loss(Context& ctx, const Tensor& input, const Tensor& target) override {
    const Tensor y = forward(ctx, input);
    Tensor diff = Tensor::empty(y.shape(), DType::kF32);
    double sum = 0.0;
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      diff.data<float>()[i] = y.data<float>()[i] - target.data<float>()[i];
      sum += double(diff.data<float>()[i]) * diff.data<float>()[i];
    }
    ctx.save(this, {diff});
    return {.value = sum / double(y.numel())};
  }
  Tensor backward_loss(Context& ctx, float grad_scale) override {
    const Tensor diff = ctx.take(this).at(0);
    Tensor dy = Tensor::empty(diff.shape(), DType::kF32);
    const float factor = (forget_ ? 1.f : 2.f) * grad_scale / float(diff.numel());
    for (std::int64_t i = 0; i < diff.numel(); ++i) dy.data<float>()[i] = factor * diff.data<float>()[i];
    return backward(ctx, dy);
  }
  std::string describe() const override { return "regression 4 -> 2"; }

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& x) override { return fc_->forward(ctx, x); }
  Tensor backward_impl(Context& ctx, const Tensor& dy) override { return fc_->backward(ctx, dy); }

 private:
  Linear* fc_;
  bool forget_;
};

TEST(GradientCheck, AModelsLossIsCheckedAndAWrongLossGradientFails) {
  std::mt19937 rng(7);
  const Tensor x = test::random_tensor({5, 4}, rng), target = test::random_tensor({5, 2}, rng);
  Regression good(false), bad(true);
  randomize(good, rng);
  for (std::size_t i = 0; i < good.parameters().size(); ++i)
    bad.parameters()[i]->data().copy_from(good.parameters()[i]->data());
  const GradientCheckResult r = check_gradients(good, x, target);
  EXPECT_TRUE(r.ok) << r.report();
  ASSERT_EQ(r.tensors.size(), 3u);  // the input (backward_loss returned its gradient), weight, bias
  EXPECT_EQ(r.tensors[0].name, "input");
  EXPECT_GT(r.scalar, 0.0);
  const GradientCheckResult wrong = check_gradients(bad, x, target);
  EXPECT_FALSE(wrong.ok) << wrong.report();
  EXPECT_FALSE(find(wrong, "fc.weight").ok);
  EXPECT_FALSE(find(wrong, "fc.bias").ok);
  EXPECT_NE(wrong.report().find("fc.weight"), std::string::npos) << wrong.report();
  EXPECT_EQ(wrong.scalar, r.scalar) << "the same loss; only its gradient is wrong";
}

// A bundled model through the same call: GPT's token ids are i32, so only
// its parameters are checked.
TEST(GradientCheck, GPTLossPasses) {
  std::mt19937 rng(8);
  models::GPTConfig c;
  c.vocab_size = 13, c.context = 8, c.n_layer = 1, c.n_head = 2, c.n_embd = 8;
  models::GPT gpt(c);
  gpt.init_weights(3);
  randomize(gpt, rng, 0.3f);  // larger than GPT-2's init, so every path carries signal
  std::vector<std::int32_t> ids(2 * 6), tg(2 * 6);
  std::uniform_int_distribution<int> tok(0, 12);
  for (auto& t : ids) t = tok(rng);
  for (auto& t : tg) t = tok(rng);
  GradientCheckOptions o;
  o.elements_per_tensor = 8;
  o.atol = 2e-4;  // the mean loss's gradients are small
  const GradientCheckResult r =
      check_gradients(gpt, Tensor::from_vector(ids, {2, 6}), Tensor::from_vector(tg, {2, 6}), o);
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(r.tensors.size(), gpt.parameters().size());
  expect_probed(r, 8);
}

TEST(GradientCheck, BadOptionsAndPlacesAreClearErrors) {
  Linear fc("fc", 2, 2, false, Device::cpu());
  const Tensor x = Tensor::zeros({1, 2}, DType::kF32);
  GradientCheckOptions o;
  o.step = 0.f;
  EXPECT_TRUE(test::throws_error([&] { check_gradients(fc, x, o); }, ErrorKind::kInvalidArgument,
                                 {"the step h must be positive", "got 0"}));
  o = {};
  o.atol = o.rtol = 0.0;
  EXPECT_TRUE(
      test::throws_error([&] { check_gradients(fc, x, o); }, ErrorKind::kInvalidArgument, {"atol (0) and rtol (0)"}));
  models::GPTConfig c;
  c.vocab_size = 13, c.context = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 8;
  models::GPT first(c, Placement{.stage = {.rank = 0, .size = 2}});
  const Tensor ids = Tensor::zeros({1, 4}, DType::kI32);
  EXPECT_TRUE(test::throws_error([&] { check_gradients(first, ids, ids); }, ErrorKind::kInvalidArgument,
                                 {"pipeline stage 0 of 2, which has no loss"}));
}

}  // namespace
}  // namespace ht::nn::gradient_check_test
