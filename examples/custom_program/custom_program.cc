// custom_program: a model of one's own on hypertrain's layers, trained by a
// loop of one's own. A two-layer MLP learns to classify random vectors by a
// hidden linear rule (the argmax of a fixed random projection); the program
// prints the falling loss and exits 1 if the loss did not fall.
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "ht/config.h"
#include "ht/core/rng.h"
#include "ht/nn/linear.h"
#include "ht/ops/cross_entropy.h"
#include "ht/ops/elementwise.h"
#include "ht/optim/adamw.h"

namespace {

constexpr std::int64_t kIn = 16, kHidden = 64, kClasses = 4, kBatch = 64;
constexpr int kSteps = 150;
constexpr int kTail = 15;  // the final loss is the mean of the last kTail steps (batches are noisy)

// fc1 -> GELU -> fc2. forward saves the pre-activation for GELU's backward;
// the Linear children save their own inputs.
class TwoLayerMlp : public ht::nn::Module {
 public:
  TwoLayerMlp(std::int64_t in, std::int64_t hidden, std::int64_t out, ht::Device device) : Module("mlp") {
    fc1_ = &add_module(std::make_unique<ht::nn::Linear>("fc1", in, hidden, true, device));
    fc2_ = &add_module(std::make_unique<ht::nn::Linear>("fc2", hidden, out, true, device));
  }

  /// Weights N(0, 1/fan_in), biases zero.
  void init(std::uint64_t seed) {
    ht::Rng rng(seed);
    for (ht::nn::Parameter* p : parameters()) {
      const ht::Shape& s = p->data().shape();
      std::vector<float> v(std::size_t(p->data().numel()), 0.f);
      if (s.size() == 2)
        for (float& x : v) x = rng.normal() / std::sqrt(float(s[1]));
      p->data().copy_from(ht::Tensor::from_vector(v, s));
    }
  }

 protected:
  ht::Tensor forward_impl(ht::nn::Context& ctx, const ht::Tensor& x) override {
    ht::Tensor h = fc1_->forward(ctx, x);
    ht::Tensor a = ht::Tensor::empty(h.shape(), ht::DType::kF32, h.device());
    ht::ops::gelu_forward(h, a);
    ctx.save(this, {h});
    return fc2_->forward(ctx, a);
  }
  ht::Tensor backward_impl(ht::nn::Context& ctx, const ht::Tensor& dy) override {
    ht::Tensor da = fc2_->backward(ctx, dy);
    ht::ops::gelu_backward(ctx.saved(this).at(0), da, da);
    return fc1_->backward(ctx, da);
  }

 private:
  ht::nn::Linear* fc1_;
  ht::nn::Linear* fc2_;
};

struct Batch {
  ht::Tensor x;       // (kBatch, kIn) f32
  ht::Tensor labels;  // (kBatch) i32
};

Batch make_batch(ht::Rng& rng, const std::vector<float>& teacher) {
  std::vector<float> x(static_cast<std::size_t>(kBatch * kIn));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(kBatch));
  for (std::int64_t b = 0; b < kBatch; ++b) {
    float* row = x.data() + b * kIn;
    for (std::int64_t i = 0; i < kIn; ++i) row[i] = rng.normal();
    float best = -INFINITY;
    for (std::int64_t k = 0; k < kClasses; ++k) {
      float score = 0.f;
      for (std::int64_t i = 0; i < kIn; ++i) score += row[i] * teacher[std::size_t(k * kIn + i)];
      if (score > best) {
        best = score;
        labels[std::size_t(b)] = std::int32_t(k);
      }
    }
  }
  return {ht::Tensor::from_vector(x, {kBatch, kIn}), ht::Tensor::from_vector(labels, {kBatch})};
}

int run() {
  TwoLayerMlp model(kIn, kHidden, kClasses, ht::Device::cpu());
  model.init(42);
  ht::optim::AdamW adamw(ht::optim::slots_of(model.parameters()), {.weight_decay = 0.01f});
  ht::Rng rng(7);
  std::vector<float> teacher(std::size_t(kClasses * kIn));
  for (float& w : teacher) w = rng.normal();

  std::printf("# hypertrain %s (%s, %s), cuda=%d\n", HT_VERSION, HT_GIT_COMMIT, HT_BUILD_TYPE, HT_HAVE_CUDA);
  std::printf("# MLP %lld -> %lld -> %lld, %lld parameters, batch %lld, AdamW lr 1e-2\n", (long long)kIn,
              (long long)kHidden, (long long)kClasses, (long long)model.num_parameters(), (long long)kBatch);
  float first = 0.f, last = 0.f;
  for (int step = 1; step <= kSteps; ++step) {
    const Batch batch = make_batch(rng, teacher);
    ht::nn::Context ctx;
    model.zero_grad();
    ht::Tensor logits = model.forward(ctx, batch.x);
    ht::Tensor losses = ht::Tensor::empty({kBatch}, ht::DType::kF32);
    ht::Tensor lse = ht::Tensor::empty({kBatch}, ht::DType::kF32);
    ht::ops::cross_entropy_forward(logits, batch.labels, losses, lse);
    float loss = 0.f;
    for (float l : losses.to_vector<float>()) loss += l / float(kBatch);
    // Mean loss: each row's loss has gradient 1/B; dlogits overwrite logits.
    ht::ops::cross_entropy_backward(logits, batch.labels, lse, 1.f / float(kBatch), logits);
    model.backward(ctx, logits);
    adamw.step(1e-2f);

    if (step == 1) first = loss;
    if (step > kSteps - kTail) last += loss / float(kTail);
    if (step == 1 || step % 15 == 0) std::printf("step %3d/%d | loss %.4f\n", step, kSteps, loss);
  }
  const bool fell = last < 0.5f * first;
  std::printf("loss %.4f at step 1 -> %.4f (mean of the last %d steps): %s\n", first, last, kTail,
              fell ? "fell" : "did NOT fall below half; training is broken");
  return fell ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_program: %s\n", e.what());
    return 2;
  }
}
