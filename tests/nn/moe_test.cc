// nn::MoE beside its PyTorch reference (moe_torch_reference): what the
// reference does not reach — options refused by name, the auxiliary losses'
// gradient scale required, every expert's gradient ready after backward
// (an idle expert's zero), full recomputation giving the same bits,
// DeepSeek-V3's bias update, and experts named by global index under
// expert parallelism.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "ht/nn/moe.h"
#include "test_util.h"

namespace ht::nn {
namespace {

Tensor normal(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, 1.f);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// Weights of unit gain (a layer starts from zeros until a model's init).
void randomize(MoE& moe, std::mt19937& rng) {
  for (Parameter* p : moe.parameters()) p->data().copy_from(normal(p->data().shape(), rng));
}

MoEOptions small(float aux = 0.f) {
  return {.dim = 8, .hidden = 12, .experts = 4, .top_k = 2, .aux_loss_coeff = aux, .z_loss_coeff = aux};
}

TEST(MoE, BadOptionsAreRefusedByName) {
  MoEOptions o = small();
  o.top_k = 5;
  EXPECT_TRUE(test::throws_error([&] { MoE("m", o, Device::cpu()); }, ErrorKind::kConfig, {"top_k 5", "[1, 4]"}));
  o = small();
  o.experts = 0;
  EXPECT_TRUE(test::throws_error([&] { MoE("m", o, Device::cpu()); }, ErrorKind::kConfig, {"0 experts"}));
  o = small(-1.f);
  EXPECT_TRUE(test::throws_error([&] { MoE("m", o, Device::cpu()); }, ErrorKind::kConfig, {"coefficients"}));
}

TEST(MoE, AuxiliaryLossesNeedTheirGradientScale) {
  std::mt19937 rng(3);
  MoE with_aux("m", small(0.01f), Device::cpu());
  randomize(with_aux, rng);
  const Tensor x = normal({2, 5, 8}, rng);
  Context ctx;
  const Tensor y = with_aux.forward(ctx, x);
  EXPECT_GT(with_aux.last_routing().aux_loss, 0.f);
  EXPECT_TRUE(test::throws_error([&] { with_aux.backward(ctx, y); }, ErrorKind::kNotSupported,
                                 {"set_aux_loss_grad_scale", "aux_loss_coeff and z_loss_coeff 0"}));
  MoE without("m", small(), Device::cpu());
  Context plain;
  const Tensor y2 = without.forward(plain, x);
  EXPECT_EQ(without.backward(plain, y2).shape(), x.shape()) << "no auxiliary loss: no scale needed";
}

TEST(MoE, EveryExpertsGradientIsReadyAndAnIdleExpertsIsZero) {
  std::mt19937 rng(5);
  MoEOptions o = small();
  o.top_k = 1;
  MoE moe("m", o, Device::cpu());
  randomize(moe, rng);
  // One token: top 1 of 4 leaves three experts idle.
  const Tensor x = normal({1, 1, 8}, rng);
  std::map<std::string, int> ready;
  for (Parameter* p : moe.parameters()) p->set_grad_ready_hook([&](Parameter& q) { ++ready[q.name()]; });
  Context ctx;
  moe.zero_grad();
  const Tensor y = moe.forward(ctx, x);
  moe.backward(ctx, normal({1, 1, 8}, rng));
  const int chosen = moe.last_routing().choice.at(0);
  for (int e = 0; e < 4; ++e)
    for (Parameter* p : moe.expert(e).parameters()) {
      EXPECT_EQ(ready[p->name()], 1) << p->name() << ": its gradient must be marked ready once (data parallelism waits)";
      const std::vector<float> g = p->grad().to_vector<float>();
      const bool zero = std::all_of(g.begin(), g.end(), [](float v) { return v == 0.f; });
      EXPECT_EQ(zero, e != chosen) << p->name();
    }
}

// As the engine runs it: gradients discarded, not zeroed, before a step. An
// expert that no token chose this time must still overwrite what an
// earlier step left in its gradient.
TEST(MoE, AnIdleExpertOverwritesADiscardedGradient) {
  std::mt19937 rng(9);
  MoEOptions o = small();
  o.top_k = 1;
  MoE moe("m", o, Device::cpu());
  randomize(moe, rng);
  const auto chosen_by = [&](const Tensor& x) {
    Context ctx(Device::cpu(), /*save_for_backward=*/false);
    moe.forward(ctx, x);
    return moe.last_routing().choice.at(0);
  };
  const Tensor first = normal({1, 1, 8}, rng);
  Tensor second = normal({1, 1, 8}, rng);
  while (chosen_by(second) == chosen_by(first)) second = normal({1, 1, 8}, rng);
  const int e = chosen_by(first);
  for (const Tensor& x : {first, second}) {
    Context ctx;
    moe.discard_grads();
    moe.forward(ctx, x);
    moe.backward(ctx, normal({1, 1, 8}, rng));
  }
  for (Parameter* p : moe.expert(e).parameters()) {
    const std::vector<float> g = p->grad().to_vector<float>();
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.f; }))
        << p->name() << " keeps the first step's gradient";
  }
}

TEST(MoE, FullRecomputationGivesTheSameBits) {
  std::mt19937 rng(7);
  const Tensor x = normal({2, 6, 8}, rng), dy = normal({2, 6, 8}, rng);
  std::vector<std::vector<float>> grads[2];
  for (int recompute = 0; recompute < 2; ++recompute) {
    MoE moe("m", small(0.01f), Device::cpu());
    std::mt19937 weights(11);
    randomize(moe, weights);
    if (recompute) moe.set_recompute(Recompute::kFull);
    Context ctx;
    ctx.set_aux_loss_grad_scale(0.5f);
    moe.zero_grad();
    moe.forward(ctx, x);
    grads[recompute].push_back(moe.backward(ctx, dy).to_vector<float>());
    for (Parameter* p : moe.parameters()) grads[recompute].push_back(p->grad().to_vector<float>());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

// b_e += rate x sign(mean load - load of e): the overloaded expert's bias
// falls, the idle ones' rise, an expert at the mean keeps its own; the
// bias then steers the choice (the weights stay the scores').
TEST(MoE, TheBiasMovesTowardsBalanceAndSteersTheChoice) {
  MoEOptions o = small();
  o.bias_update_rate = 0.25f;
  MoE moe("m", o, Device::cpu());
  EXPECT_EQ(moe.expert_bias(), std::vector<float>(4, 0.f));
  moe.update_expert_bias({10, 2, 4, 0});  // mean 4
  EXPECT_EQ(moe.expert_bias(), (std::vector<float>{-0.25f, 0.25f, 0.f, 0.25f}));
  std::mt19937 rng(5);
  randomize(moe, rng);
  const Tensor x = normal({1, 6, 8}, rng);
  moe.set_expert_bias({100.f, 100.f, 0.f, 0.f});  // far above any score gap: experts 0 and 1 for every token
  Context ctx;
  moe.forward(ctx, x);
  EXPECT_EQ(moe.last_routing().tokens_per_expert, (std::vector<std::int64_t>{6, 6, 0, 0}));
  EXPECT_TRUE(test::throws_error([&] { moe.set_expert_bias({1.f}); }, ErrorKind::kShapeMismatch, {"1 values", "4 experts"}));
  MoE without("m", small(), Device::cpu());
  without.update_expert_bias({10, 2, 4, 0});
  EXPECT_EQ(without.expert_bias(), std::vector<float>(4, 0.f)) << "no rate: no bias";
  o.bias_update_rate = -1.f;
  EXPECT_TRUE(test::throws_error([&] { MoE("m", o, Device::cpu()); }, ErrorKind::kConfig, {"bias update rate -1"}));
}

}  // namespace
}  // namespace ht::nn
