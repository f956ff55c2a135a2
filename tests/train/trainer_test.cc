// The training loop: gradient accumulation equals one larger batch, runs are
// reproducible, the loss falls, and bad options are refused clearly.
#include <gtest/gtest.h>

#include "ht/train/trainer.h"
#include "test_util.h"

namespace ht::train {
namespace {

data::TokenSplits synthetic_text() {
  // A repeating pattern with some structure: learnable well below unigram entropy.
  data::TokenSplits s;
  s.vocab_size = 256;
  const std::string phrase = "the quick brown fox jumps over the lazy dog. ";
  for (int i = 0; i < 400; ++i)
    for (char c : phrase) s.train.push_back(std::int32_t(c));
  for (int i = 0; i < 20; ++i)
    for (char c : phrase) s.val.push_back(std::int32_t(c));
  return s;
}

TrainerOptions small_options() {
  TrainerOptions o;
  o.model = {.vocab_size = 256, .context = 32, .n_layer = 2, .n_head = 2, .n_embd = 32};
  o.seq_len = 16;
  o.micro_batch = 4;
  o.steps = 6;
  o.warmup_steps = 2;
  o.lr = 3e-3f;
  o.eval_batches = 2;
  return o;
}

std::vector<float> all_weights(Trainer& t) {
  std::vector<float> out;
  for (nn::Parameter* p : t.model().parameters()) {
    const auto v = p->data().to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(Trainer, AccumulationEqualsOneLargerBatch) {
  const data::TokenSplits data = synthetic_text();
  TrainerOptions big = small_options(), acc = small_options();
  big.micro_batch = 8;
  acc.micro_batch = 2;
  acc.grad_accum = 4;
  Trainer a(big, data), b(acc, data);
  for (int i = 0; i < 3; ++i) {
    const StepStats sa = a.step(), sb = b.step();
    EXPECT_NEAR(sa.loss, sb.loss, 1e-5 * std::abs(sa.loss)) << "step " << i;
    EXPECT_NEAR(sa.grad_norm, sb.grad_norm, 1e-4 * sa.grad_norm) << "step " << i;
  }
  const auto wa = all_weights(a), wb = all_weights(b);
  EXPECT_TRUE(test::all_close(wb, std::vector<double>(wa.begin(), wa.end()), 1e-5));
}

TEST(Trainer, SameSeedSameBitsAndLossFalls) {
  const data::TokenSplits data = synthetic_text();
  TrainerOptions o = small_options();
  o.steps = 40;
  o.lr = 1e-2f;
  o.min_lr = 1e-3f;
  Trainer a(o, data), b(o, data);
  const float val0 = a.evaluate();
  float last = 0.f;
  for (int i = 0; i < 40; ++i) {
    const StepStats sa = a.step(), sb = b.step();
    ASSERT_EQ(sa.loss, sb.loss) << "step " << i;
    last = sa.loss;
  }
  EXPECT_EQ(all_weights(a), all_weights(b));
  EXPECT_LT(last, 0.6f * val0);
  EXPECT_LT(a.evaluate(), unigram_entropy(data.val, 256));
}

TEST(Trainer, BadOptionsAreRefused) {
  const data::TokenSplits data = synthetic_text();
  TrainerOptions o = small_options();
  o.seq_len = 64;
  EXPECT_TRUE(test::throws_error([&] { Trainer t(o, data); }, ErrorKind::kConfig, {"--seq-len 64", "context=32"}));
  o = small_options();
  o.grad_accum = 0;
  EXPECT_TRUE(test::throws_error([&] { Trainer t(o, data); }, ErrorKind::kConfig, {"--grad-accum"}));
  o = small_options();
  o.model.vocab_size = 100;
  EXPECT_TRUE(test::throws_error([&] { Trainer t(o, data); }, ErrorKind::kConfig, {"vocabulary (256)"}));
}

TEST(UnigramEntropy, UniformAndDegenerate) {
  EXPECT_NEAR(unigram_entropy({0, 1, 2, 3}, 4), std::log(4.0), 1e-12);
  EXPECT_NEAR(unigram_entropy({2, 2, 2}, 4), 0.0, 1e-12);
}

}  // namespace
}  // namespace ht::train
