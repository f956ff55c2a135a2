// The dynamic loss scaler's state machine: growth after a window of finite
// steps, back-off on overflow after the hysteresis budget, the floor and
// ceiling, skipping, and the disabled (f32/bf16) scaler.
#include <gtest/gtest.h>

#include "ht/precision/loss_scaler.h"
#include "ht/precision/policy.h"
#include "test_util.h"

namespace ht::precision {
namespace {

LossScalerOptions small_window(int hysteresis = 1) {
  LossScalerOptions o;
  o.initial_scale = 1024.f;
  o.growth_interval = 3;
  o.hysteresis = hysteresis;
  o.min_scale = 64.f;
  o.max_scale = 4096.f;
  return o;
}

TEST(LossScaler, GrowsAfterEachWindowOfFiniteStepsUpToTheCeiling) {
  LossScaler s(true, small_window());
  EXPECT_EQ(s.scale(), 1024.f);
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.f);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 2048.f);
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 4096.f);
  for (int i = 0; i < 9; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 4096.f) << "capped at max_scale";
  EXPECT_EQ(s.state().skipped_steps, 0);
}

TEST(LossScaler, OverflowSkipsHalvesAndRestartsTheWindow) {
  LossScaler s(true, small_window());
  s.update(false);
  s.update(false);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512.f);
  EXPECT_EQ(s.state().skipped_steps, 1);
  EXPECT_EQ(s.state().good_steps, 0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 512.f) << "the window restarted at the overflow";
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.f);
}

TEST(LossScaler, HysteresisToleratesOverflowsBeforeBackingOff) {
  LossScaler s(true, small_window(/*hysteresis=*/3));
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1024.f) << "two overflows are within a budget of three";
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512.f);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 256.f) << "once the budget is spent every overflow backs off";
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 512.f);
  EXPECT_EQ(s.state().hysteresis_left, 3) << "growth refills the budget";
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512.f);
  EXPECT_EQ(s.state().skipped_steps, 5);
}

TEST(LossScaler, NeverBelowTheMinimum) {
  LossScaler s(true, small_window());
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 64.f);
}

TEST(LossScaler, DisabledIsOneAndNeverSkips) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 1.f);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1.f);
  EXPECT_EQ(s.state().skipped_steps, 0);
}

TEST(LossScaler, StateRoundTrips) {
  LossScaler a(true, small_window(2)), b(true, small_window(2));
  a.update(true);
  a.update(false);
  b.set_state(a.state());
  EXPECT_EQ(a.state(), b.state());
  EXPECT_EQ(a.update(true), b.update(true));
  EXPECT_EQ(a.state(), b.state());
}

TEST(LossScaler, BadOptionsFailClearly) {
  LossScalerOptions o;
  o.backoff_factor = 1.5f;
  EXPECT_TRUE(test::throws_error([&] { LossScaler s(true, o); }, ErrorKind::kConfig, {"backoff factor 1.5"}));
  o = {};
  o.min_scale = 1e9f;
  EXPECT_TRUE(test::throws_error([&] { LossScaler s(true, o); }, ErrorKind::kConfig, {"min (1000000000)"}));
}

TEST(Policy, ParsesTheThreePrecisions) {
  EXPECT_EQ(parse_policy("fp32").compute, DType::kF32);
  EXPECT_EQ(parse_policy("fp16").compute, DType::kF16);
  EXPECT_TRUE(parse_policy("fp16").needs_loss_scaling());
  EXPECT_EQ(parse_policy("bf16").compute, DType::kBF16);
  EXPECT_FALSE(parse_policy("bf16").needs_loss_scaling());
  EXPECT_EQ(parse_policy("bf16").reduce, DType::kF32);
  EXPECT_TRUE(test::throws_error([] { parse_policy("fp8"); }, ErrorKind::kConfig, {"fp8", "fp32, fp16 or bf16"}));
}

}  // namespace
}  // namespace ht::precision
