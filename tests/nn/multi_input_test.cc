// Modules of several inputs (Module::compute_with, Tape::call with further
// inputs): gradients reach every input (finite differences), through plain
// ops, an encoder-decoder's DecoderBlock (causal self-attention with the
// target's mask, cross-attention with the memory's) and under full
// recomputation (the same bits); two masks by their names; and the errors
// that name a module given inputs it does not take.
#include <gtest/gtest.h>

#include <random>

#include "ht/nn/decoder_block.h"
#include "ht/nn/encoder_block.h"
#include "ht/nn/functional.h"
#include "ht/nn/gradient_check.h"
#include "ht/ops/elementwise.h"
#include "test_util.h"

namespace ht::nn::multi_input_test {
namespace {

void fill_random(Module& m, std::mt19937& rng) {
  for (Parameter* p : m.parameters()) p->data().copy_from(test::random_tensor(p->data().shape(), rng, -0.5f, 0.5f));
}

// y = lin(x) * gate + gate: two inputs, each read twice.
class Gated : public Module {
 public:
  Gated() : Module("gated") { lin_ = &add_module(std::make_unique<Linear>("lin", 6, 6, true, Device::cpu())); }

 protected:
  Var compute_with(const Var& x, const std::vector<Var>& more) override {
    return (*lin_)(x) * more.at(0) + more.at(0);
  }

 private:
  Linear* lin_;
};

// x (B, S + T, 6): the first S positions are a source the encoder reads,
// the last T a target the decoder reads with the encoder's memory; a gated
// skip adds a module of two plain inputs.
class EncoderDecoder : public Module {
 public:
  explicit EncoderDecoder(std::int64_t s) : Module("encdec"), s_(s) {
    enc_ = &add_module(std::make_unique<EncoderBlock>(
        "enc", EncoderBlockConfig{.dim = 6, .n_head = 2, .key_mask = "memory_mask"}, Device::cpu()));
    dec_ = &add_module(std::make_unique<DecoderBlock>("dec", DecoderBlockConfig{.dim = 6, .n_head = 2},
                                                      Device::cpu()));
    gated_ = &add_module(std::make_unique<Gated>());
  }

 protected:
  Var compute(const Var& x) override {
    const Var src = narrow(x, 1, 0, s_), tgt = narrow(x, 1, s_, x.size(1) - s_);
    const Var memory = (*enc_)(src);
    return (*gated_)((*dec_)(tgt, {memory}), {tgt});
  }

 private:
  std::int64_t s_;
  EncoderBlock* enc_;
  DecoderBlock* dec_;
  Gated* gated_;
};

// Source of 4 positions (entry 1: the last one padding), target of 3
// (entry 0: the last one padding).
void set_masks(Context& ctx) {
  ctx.set_side_input("memory_mask", Tensor::from_vector(std::vector<std::int32_t>{1, 1, 1, 1, 1, 1, 1, 0}, {2, 4}));
  ctx.set_side_input("key_mask", Tensor::from_vector(std::vector<std::int32_t>{1, 1, 0, 1, 1, 1}, {2, 3}));
}

TEST(MultiInput, EveryInputGetsItsGradient) {
  std::mt19937 rng(3);
  EncoderDecoder m(4);
  fill_random(m, rng);
  GradientCheckOptions o;
  o.prepare = set_masks;
  o.elements_per_tensor = 0;
  const GradientCheckResult r = check_gradients(m, test::random_tensor({2, 7, 6}, rng), o);
  EXPECT_TRUE(r.ok) << r.report();
}

// The masks are read by their names: without the memory's, the output of
// entry 1 changes; without the target's, the output of entry 0 (whose
// padded position 2 no longer hides from the causal self-attention... of
// later positions: none, so only the padded row's own output moves).
TEST(MultiInput, EachAttentionReadsItsOwnMask) {
  std::mt19937 rng(5);
  EncoderDecoder m(4);
  fill_random(m, rng);
  const Tensor x = test::random_tensor({2, 7, 6}, rng);
  const auto run = [&](bool memory_mask, bool key_mask) {
    Context ctx(Device::cpu(), false);
    Context full(Device::cpu(), false);
    set_masks(full);
    if (memory_mask) ctx.set_side_input("memory_mask", *full.side_input("memory_mask"));
    if (key_mask) ctx.set_side_input("key_mask", *full.side_input("key_mask"));
    return m.forward(ctx, x).to_vector<float>();
  };
  const std::vector<float> both = run(true, true), no_memory = run(false, true), no_key = run(true, false);
  const std::size_t half = both.size() / 2;  // entry 0's outputs, then entry 1's
  EXPECT_TRUE(std::equal(both.begin(), both.begin() + half, no_memory.begin())) << "entry 0 has no memory padding";
  EXPECT_FALSE(std::equal(both.begin() + half, both.end(), no_memory.begin() + half));
  EXPECT_FALSE(std::equal(both.begin(), both.begin() + half, no_key.begin())) << "entry 0's target padding";
  EXPECT_TRUE(std::equal(both.begin() + half, both.end(), no_key.begin() + half)) << "entry 1 has no target padding";
}

TEST(MultiInput, FullRecomputationGivesTheSameBits) {
  std::mt19937 rng(7);
  EncoderDecoder m(4);
  fill_random(m, rng);
  const Tensor x = test::random_tensor({2, 7, 6}, rng), dy = test::random_tensor({2, 3, 6}, rng);
  const auto run = [&](Recompute mode) {
    m.set_recompute(mode);
    m.zero_grad();
    Context ctx;
    set_masks(ctx);
    std::vector<std::vector<float>> out{m.forward(ctx, x).to_vector<float>(), m.backward(ctx, dy).to_vector<float>()};
    for (Parameter* p : m.parameters()) out.push_back(p->grad().to_vector<float>());
    EXPECT_EQ(ctx.saved_bytes(), 0);
    return out;
  };
  const auto plain = run(Recompute::kNone);
  // The model's children recompute whole (the decoder keeps only its target and memory).
  for (Module* c : m.children()) c->set_recompute(Recompute::kFull);
  m.zero_grad();
  Context ctx;
  set_masks(ctx);
  std::vector<std::vector<float>> full{m.forward(ctx, x).to_vector<float>(), m.backward(ctx, dy).to_vector<float>()};
  for (Parameter* p : m.parameters()) full.push_back(p->grad().to_vector<float>());
  EXPECT_EQ(full, plain);
  EXPECT_EQ(run(Recompute::kSelective), plain);
}

// docs/api.md's op of one's own on the tape (Tape::record), as written there.
nn::Var cube(const nn::Var& x) {  // x^3, elementwise
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::mul(x.tensor(), x.tensor(), y);
  ops::mul(y, x.tensor(), y);
  return x.tape().record(std::move(y), {x}, {x.tensor()},
                         [](nn::Context&, const Tensor& dy, const std::vector<Tensor>& saved,
                            const std::vector<bool>&) {
                           Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
                           ops::mul(saved[0], saved[0], dx);  // x^2
                           ops::scale(dx, 3.f);
                           ops::mul(dx, dy, dx);
                           return std::vector<Tensor>{dx};
                         });
}

class Cubed : public Module {
 public:
  Cubed() : Module("cubed") { lin_ = &add_module(std::make_unique<Linear>("lin", 5, 5, true, Device::cpu())); }

 protected:
  Var compute(const Var& x) override { return cube((*lin_)(x)); }

 private:
  Linear* lin_;
};

TEST(OpOfOnesOwn, TheDocsExampleMatchesFiniteDifferences) {
  std::mt19937 rng(9);
  Cubed m;
  fill_random(m, rng);
  const GradientCheckResult r = check_gradients(m, test::random_tensor({3, 5}, rng), {});
  EXPECT_TRUE(r.ok) << r.report();
}

class OneInput : public Module {
 public:
  OneInput() : Module("one") {}

 protected:
  Var compute(const Var& x) override { return x * 2.f; }
};

class Caller : public Module {
 public:
  explicit Caller(Module& callee) : Module("caller"), callee_(callee) {}

 protected:
  Var compute(const Var& x) override { return callee_(x, {x}); }

 private:
  Module& callee_;
};

TEST(MultiInput, AModuleGivenInputsItDoesNotTakeIsNamed) {
  OneInput one;
  Linear lin("lin", 4, 4, true, Device::cpu());
  const Tensor x = Tensor::zeros({2, 4}, DType::kF32);
  Context ctx;
  EXPECT_TRUE(test::throws_error([&] { Caller(one).forward(ctx, x); }, ErrorKind::kNotSupported,
                                 {"'one'", "1 further input", "compute_with"}));
  EXPECT_TRUE(test::throws_error([&] { Caller(lin).forward(ctx, x); }, ErrorKind::kNotSupported,
                                 {"'lin'", "its forward takes one"}));
  CrossAttention cross("cross", {.dim = 4, .n_head = 2}, Device::cpu());
  EXPECT_TRUE(test::throws_error([&] { cross.forward(ctx, Tensor::zeros({2, 3, 4}, DType::kF32)); },
                                 ErrorKind::kNotSupported, {"'cross'", "from one input", "m(x, {more})"}));
}

}  // namespace
}  // namespace ht::nn::multi_input_test
