// Optimizers over slots, the learning-rate schedule and global-norm clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ht/optim/adamw.h"
#include "ht/optim/clip.h"
#include "ht/optim/lr_schedule.h"
#include "ht/optim/sgd.h"
#include "test_util.h"

namespace ht::optim {
namespace {

TEST(LrSchedule, WarmupPeakCosineFloor) {
  const LrSchedule s{1e-3f, 1e-4f, 10, 110};
  EXPECT_FLOAT_EQ(s.lr(0), 1e-4f);
  EXPECT_FLOAT_EQ(s.lr(9), 1e-3f);
  EXPECT_FLOAT_EQ(s.lr(10), 1e-3f);
  EXPECT_NEAR(s.lr(60), 5.5e-4f, 1e-9);  // halfway down the cosine
  EXPECT_FLOAT_EQ(s.lr(110), 1e-4f);
  EXPECT_FLOAT_EQ(s.lr(500), 1e-4f);
  for (int i = 11; i < 110; ++i) EXPECT_LE(s.lr(i), s.lr(i - 1));
}

TEST(LrSchedule, LinearAndConstantDecay) {
  const LrSchedule linear{1e-3f, 1e-4f, 10, 110, Decay::kLinear};
  EXPECT_FLOAT_EQ(linear.lr(9), 1e-3f);  // the same warm-up
  EXPECT_FLOAT_EQ(linear.lr(10), 1e-3f);
  EXPECT_NEAR(linear.lr(35), 7.75e-4f, 1e-9);  // a quarter of the way down a straight line
  EXPECT_NEAR(linear.lr(85), 3.25e-4f, 1e-9);
  EXPECT_FLOAT_EQ(linear.lr(110), 1e-4f);
  const LrSchedule constant{1e-3f, 1e-4f, 10, 110, Decay::kConstant};
  EXPECT_FLOAT_EQ(constant.lr(4), 5e-4f);
  for (int i = 10; i < 110; ++i) EXPECT_FLOAT_EQ(constant.lr(i), 1e-3f);
  EXPECT_FLOAT_EQ(constant.lr(110), 1e-4f);  // min_lr once the run's steps are done, as the others
  EXPECT_EQ(parse_decay("linear"), Decay::kLinear);
  EXPECT_TRUE(test::throws_error([] { parse_decay("step"); }, ErrorKind::kConfig, {"choose cosine, linear or constant"}));
}

TEST(Clip, NormOverAllTensorsAndCoefficient) {
  const Tensor a = Tensor::from_vector<float>({3.f, 0.f}, {2});
  const Tensor b = Tensor::from_vector<float>({4.f}, {1});
  EXPECT_FLOAT_EQ(global_grad_norm({a, b}), 5.f);
  int reduced = 0;
  // The reduce hook sees the sum of squares before the root (e.g. an all-reduce over ranks).
  EXPECT_FLOAT_EQ(global_grad_norm({a, b}, [&](Tensor& acc) { ++reduced; acc.data<float>()[0] *= 4.f; }), 10.f);
  EXPECT_EQ(reduced, 1);
  EXPECT_FLOAT_EQ(clip_coefficient(5.f, 1.f), 1.f / (5.f + 1e-6f));
  EXPECT_FLOAT_EQ(clip_coefficient(0.5f, 1.f), 1.f);
  EXPECT_FLOAT_EQ(clip_coefficient(5.f, 0.f), 1.f);
}

// The loss scale divides every gradient a rank holds; the norm counts only
// the pieces it is given; a non-finite gradient anywhere makes the norm
// non-finite after the reduction, even on a rank whose own pieces are finite.
TEST(Clip, UnscaleAndGlobalNorm) {
  Tensor held = Tensor::from_vector<float>({6.f, 0.f, 8.f}, {3});
  const Tensor counted = held.slice(0, 2);  // the piece this rank counts: 6, 0 -> 3, 0
  int reduced = 0;
  EXPECT_FLOAT_EQ(unscale_and_global_norm({held}, {counted}, 2.f, Device::cpu(), [&](Tensor&) { ++reduced; }), 3.f);
  EXPECT_EQ(held.to_vector<float>(), (std::vector<float>{3.f, 0.f, 4.f}));
  EXPECT_EQ(reduced, 1);
  EXPECT_FLOAT_EQ(unscale_and_global_norm({held}, {held}, 1.f, Device::cpu()), 5.f);  // a scale of 1 leaves them
  Tensor bad = Tensor::from_vector<float>({1.f, INFINITY}, {2});
  const Tensor finite_piece = bad.slice(0, 1);
  EXPECT_FALSE(std::isfinite(unscale_and_global_norm({bad}, {finite_piece}, 4.f, Device::cpu())));
  // A peer's overflow reaches this rank through the reduction.
  const Tensor mine = Tensor::from_vector<float>({1.f}, {1});
  EXPECT_FALSE(std::isfinite(
      unscale_and_global_norm({mine}, {mine}, 4.f, Device::cpu(),
                              [](Tensor& sum) { sum.data<float>()[0] += INFINITY; })));
  // A rank that counts nothing still takes part in the reduction, its sum on
  // the device asked for (on a GPU run, the one every rank's NCCL call needs:
  // emu_training's cp2 run hung while it followed the counted pieces).
  Device seen = Device::cuda(0);
  EXPECT_FLOAT_EQ(unscale_and_global_norm({held}, {}, 1.f, Device::cpu(), [&](Tensor& sum) {
                    seen = sum.device();
                    sum.data<float>()[0] += 49.f;  // the peers' squares
                  }),
                  7.f);
  EXPECT_EQ(seen, Device::cpu());
}

TEST(AdamW, MatchesReferenceFormulaAndSkipsDecayWhereAsked) {
  std::mt19937 rng(1);
  Tensor p1 = test::random_tensor({6}, rng), p2 = test::random_tensor({3}, rng);
  Tensor g1 = test::random_tensor({6}, rng), g2 = test::random_tensor({3}, rng);
  const auto p1_0 = p1.to_vector<float>(), p2_0 = p2.to_vector<float>();
  AdamW opt({{"w", p1, g1, true}, {"b", p2, g2, false}}, {0.9f, 0.95f, 1e-8f, 0.1f});
  // Reference in double: torch.optim.AdamW's update, two steps with grad_scale 0.5.
  auto reference = [&](std::vector<float> p0, const Tensor& g, float wd) {
    std::vector<double> p(p0.begin(), p0.end()), m(p.size()), v(p.size());
    const auto gv = g.to_vector<float>();
    for (int t = 1; t <= 2; ++t)
      for (std::size_t i = 0; i < p.size(); ++i) {
        const double gi = 0.5 * gv[i];
        p[i] *= 1 - 1e-2 * wd;
        m[i] = 0.9 * m[i] + 0.1 * gi;
        v[i] = 0.95 * v[i] + 0.05 * gi * gi;
        p[i] -= 1e-2 / (1 - std::pow(0.9, t)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.95, t)) + 1e-8);
      }
    return p;
  };
  opt.step(1e-2f, 0.5f);
  opt.step(1e-2f, 0.5f);
  EXPECT_EQ(opt.step_count(), 2);
  EXPECT_TRUE(test::all_close(p1.to_vector<float>(), reference(p1_0, g1, 0.1f), 1e-6));
  EXPECT_TRUE(test::all_close(p2.to_vector<float>(), reference(p2_0, g2, 0.f), 1e-6));
  const auto st = opt.state();
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[0].first, "w.exp_avg");
  EXPECT_EQ(st[3].first, "b.exp_avg_sq");
}

TEST(SGD, MomentumAsTorch) {
  Tensor p = Tensor::from_vector<float>({1.f}, {1}), g = Tensor::from_vector<float>({2.f}, {1});
  SGD opt({{"p", p, g, true}}, {0.5f, 0.f, false});
  opt.step(0.1f);  // buf = 2, p = 1 - 0.2
  opt.step(0.1f);  // buf = 0.5*2 + 2 = 3, p = 0.8 - 0.3
  EXPECT_FLOAT_EQ(p.item(), 0.5f);
}

}  // namespace
}  // namespace ht::optim
