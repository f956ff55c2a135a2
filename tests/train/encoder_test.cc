// A model of one's own built from the modelling kit, as a new user would
// write it: a small encoder that reads padded token sequences (embedding,
// non-causal self-attention with a key padding mask, the first token's row
// taken with index_select, a linear head) and regresses a number with a
// mean-squared-error loss, trained by the engine. It must learn, its output
// must not depend on what the padding holds, and its gradients must match
// finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "ht/core/rng.h"
#include "ht/nn/embedding.h"
#include "ht/nn/linear.h"
#include "ht/nn/model.h"
#include "ht/nn/self_attention.h"
#include "ht/ops/index_select.h"
#include "ht/ops/mse.h"
#include "ht/train/engine.h"
#include "test_util.h"

namespace ht {
namespace {

constexpr std::int64_t kVocab = 8, kT = 12, kDim = 16;
constexpr std::int32_t kPad = 0, kCls = 1, kCounted = 3;

// tokens (B, T) i32, kCls first, then tokens in [2, kVocab), then kPad -> a
// number (B) f32: the share of kCounted among the tokens after kCls.
class Encoder : public nn::Model {
 public:
  explicit Encoder(const nn::Placement& at) : Model("encoder", at) {
    require_single_stage();
    embed_ = &add_module(std::make_unique<nn::Embedding>("embed", kVocab, kT, kDim, at.device));
    attn_ = &add_module(std::make_unique<nn::SelfAttention>(
        "attn", nn::AttentionConfig{.dim = kDim, .n_head = 2, .causal = false, .bias = true}, at.device));
    head_ = &add_module(std::make_unique<nn::Linear>("head", kDim, 1, true, at.device));
    for (nn::Parameter* p : parameters())
      if (p->full_shape().size() == 2) p->set_init(nn::Init::xavier_uniform());
  }
  std::string describe() const override { return "Encoder V8 T12 C16"; }

  nn::LossValue forward_loss(nn::Context& ctx, const Tensor& tokens, const Tensor& target) override {
    Tensor y = forward(ctx, tokens);
    Tensor loss = Tensor::empty({1}, DType::kF32, device());
    ops::mse_forward(y, target, loss);
    ctx.save(this, {y, target});
    return {.value = loss.item(0)};
  }
  Tensor backward_loss(nn::Context& ctx, float grad_scale) override {
    std::vector<Tensor> s = ctx.take(this);
    Tensor dy = Tensor::empty(s[0].shape(), s[0].dtype(), device());
    ops::mse_backward(s[0], s[1], grad_scale, dy);
    return backward(ctx, dy);
  }

 protected:
  Tensor forward_impl(nn::Context& ctx, const Tensor& tokens) override {
    const std::int64_t b = tokens.size(0);
    // Keys that hold padding are never attended: the mask is a side input
    // of the micro-batch ("key_mask", given with the data), read by every
    // attention layer.
    Tensor a = attn_->forward(ctx, embed_->forward(ctx, tokens));  // (B, T, C)
    // The first (kCls) token's row: it attends to every token but the padding.
    Tensor cls = Tensor::empty({b, 1, kDim}, a.dtype(), device());
    ops::index_select(a, 1, first_row(), cls);
    ctx.save(this, {a});
    return head_->forward(ctx, cls.view({b, kDim})).view({b});
  }
  Tensor backward_impl(nn::Context& ctx, const Tensor& dy) override {
    const Tensor& a = ctx.saved(this).at(0);
    const std::int64_t b = a.size(0);
    Tensor dcls = head_->backward(ctx, dy.view({b, 1}));  // (B, C)
    Tensor da = Tensor::empty(a.shape(), a.dtype(), device());
    ops::index_select_backward(dcls.view({b, 1, kDim}), 1, first_row(), da);
    return embed_->backward(ctx, attn_->backward(ctx, da));
  }

 private:
  Tensor first_row() const { return Tensor::from_vector(std::vector<std::int32_t>{0}, {1}).to(device()); }

  nn::Embedding* embed_;
  nn::SelfAttention* attn_;
  nn::Linear* head_;
};

// Sequences of random length, padded, with their padding mask (side input
// "key_mask"); sample i of stream `seed` depends on (seed, i) alone.
data::MicroBatch make_batch(std::uint64_t seed, std::int64_t first, std::int64_t rows) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows * kT), kPad), mask(tokens.size(), 0);
  std::vector<float> target(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    Rng rng;
    rng.set_state(seed, std::uint64_t(first + r) << 16);
    const std::int64_t len = 2 + std::int64_t(rng.below(kT - 1));  // kCls and 1..kT-1 tokens
    std::int32_t* row = tokens.data() + r * kT;
    for (std::int64_t t = 0; t < len; ++t) mask[std::size_t(r * kT + t)] = 1;
    row[0] = kCls;
    int counted = 0;
    for (std::int64_t t = 1; t < len; ++t) {
      row[t] = std::int32_t(2 + rng.below(kVocab - 2));
      counted += row[t] == kCounted;
    }
    target[std::size_t(r)] = float(counted) / float(len - 1);
  }
  data::MicroBatch b{.input = Tensor::from_vector(tokens, {rows, kT}), .target = Tensor::from_vector(target, {rows})};
  b.side["key_mask"] = Tensor::from_vector(mask, {rows, kT});
  return b;
}

class PaddedCounting : public data::DataSource {
 public:
  void attach(const data::DataShard& shard) override { seed_ = shard.seed; }
  data::MicroBatch samples(std::int64_t first, std::int64_t count) override { return make_batch(seed_, first, count); }
  bool has_validation() const override { return true; }
  data::MicroBatch validation_samples(std::int64_t first, std::int64_t count) override {
    return make_batch(seed_ ^ 0xabcd, first, count);
  }

 private:
  std::uint64_t seed_ = 0;
};

train::ModelFactory encoder() {
  return [](const nn::Placement& at) { return std::make_unique<Encoder>(at); };
}

TEST(Encoder, LearnsToCountThroughThePaddingMask) {
  train::EngineOptions o;
  o.steps = 150;
  o.layout.micro_batch = 32;
  o.lr = 5e-3f;
  o.min_lr = 5e-4f;
  o.warmup_steps = 10;
  o.eval_samples = 128;
  PaddedCounting data;
  train::Engine engine(o, encoder(), data);
  const double before = engine.evaluate().loss;
  for (int i = 0; i < o.steps; ++i) engine.step();
  const double after = engine.evaluate().loss;
  // The target's variance is about 0.02; predicting its mean scores that.
  EXPECT_LT(after, 0.25 * before) << "validation MSE " << before << " -> " << after;
  EXPECT_LT(after, 0.01);
}

// What a padding position carries (the kPad row of the token embedding,
// shifted) must not reach the output through the masked keys; without the
// mask the same shift does move it.
TEST(Encoder, PaddingDoesNotChangeTheOutput) {
  const data::MicroBatch batch = make_batch(11, 0, 5);
  for (const bool mask : {true, false}) {
    Encoder model({});
    model.init_weights(3);
    nn::Context a(Device::cpu(), false), b(Device::cpu(), false);
    if (mask)
      for (nn::Context* c : {&a, &b}) c->set_side_input("key_mask", batch.side.at("key_mask"));
    const std::vector<float> before = model.forward(a, batch.input).to_vector<float>();
    nn::Parameter& wte = *model.parameters().front();
    ASSERT_EQ(wte.name(), "embed.wte");
    float* row = wte.data().data<float>() + kPad * kDim;
    for (std::int64_t j = 0; j < kDim; ++j) row[j] += 10.f;
    const std::vector<float> after = model.forward(b, batch.input).to_vector<float>();
    if (mask)
      EXPECT_EQ(before, after) << "what the padding holds reached the output";
    else
      EXPECT_NE(before, after) << "without the mask the padding should be seen";
  }
}

TEST(Encoder, GradientsMatchFiniteDifferences) {
  Encoder model({});
  model.init_weights(9);
  const data::MicroBatch batch = make_batch(5, 0, 3);
  auto loss_of = [&] {
    nn::Context ctx(Device::cpu(), true);
    ctx.set_side_input("key_mask", batch.side.at("key_mask"));
    return model.forward_loss(ctx, batch.input, batch.target).value;
  };
  model.zero_grad();
  {
    nn::Context ctx(Device::cpu(), true);
    ctx.set_side_input("key_mask", batch.side.at("key_mask"));
    model.forward_loss(ctx, batch.input, batch.target);
    model.backward_loss(ctx, 1.f);
  }
  for (nn::Parameter* p : model.parameters()) {
    const std::vector<float> grad = p->grad().to_vector<float>();
    float* v = p->data().data<float>();
    // A few elements of each parameter, central differences in f32.
    for (std::int64_t i = 0; i < p->data().numel(); i += std::max<std::int64_t>(1, p->data().numel() / 5)) {
      const float keep = v[i], h = 1e-2f;
      v[i] = keep + h;
      const double up = loss_of();
      v[i] = keep - h;
      const double down = loss_of();
      v[i] = keep;
      const double numeric = (up - down) / (2.0 * h);
      EXPECT_NEAR(grad[std::size_t(i)], numeric, 2e-3 + 2e-2 * std::abs(numeric)) << p->name() << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace ht
