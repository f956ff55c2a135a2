// Activation recomputation (nn::Recompute) changes no bits and keeps less: a
// GPT block and a masked grouped-query attention layer, and GPT and Llama
// trained by the engine in fp32 and bf16, give the same outputs, losses,
// per-parameter gradients and weights under none, selective and full, bit
// for bit; a fully recomputed block keeps only its input, selective keeps
// neither the attention's output nor its log-sum-exp (in the attention or
// in its output projection), and a training step's activation peak falls.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ht/core/memory.h"
#include "ht/nn/block.h"
#include "ht/nn/self_attention.h"
#include "lm_engine.h"
#include "test_util.h"

namespace ht {
namespace {

using nn::Recompute;

constexpr Recompute kModes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};

// The bits of a tensor's values as f32 (exact for f32, bf16 and f16), so that
// -0 and 0 or two NaNs are told apart as memcmp would.
using test::bits;

void randomize(nn::Module& m, std::mt19937& rng, float scale) {
  for (nn::Parameter* p : m.parameters())
    p->data().copy_from(test::random_tensor(p->data().shape(), rng, -scale, scale));
}

// One forward and backward of a module in a saving context, under `mode`.
struct ModuleRun {
  std::vector<std::uint32_t> y, dx;
  std::vector<std::vector<std::uint32_t>> grads;
  std::int64_t saved_bytes = 0;  // after forward
  int pre_forward = 0, post_forward = 0, pre_backward = 0, post_backward = 0;
};

ModuleRun run_module(nn::Module& m, Recompute mode, const Tensor& x, const Tensor& dy, const Tensor* key_mask) {
  ModuleRun r;
  m.set_recompute(mode);
  m.set_pre_forward_hook([&](nn::Module&, nn::Context&) { ++r.pre_forward; });
  m.set_post_forward_hook([&](nn::Module&, nn::Context&) { ++r.post_forward; });
  m.set_pre_backward_hook([&](nn::Module&, nn::Context&) { ++r.pre_backward; });
  m.set_post_backward_hook([&](nn::Module&, nn::Context&) { ++r.post_backward; });
  nn::Context ctx;
  if (key_mask) ctx.set_side_input("key_mask", *key_mask);
  m.zero_grad();
  r.y = bits(m.forward(ctx, x));
  r.saved_bytes = ctx.saved_bytes();
  r.dx = bits(m.backward(ctx, dy));
  EXPECT_EQ(ctx.saved_bytes(), 0) << "backward leaves entries behind under " << nn::recompute_name(mode);
  for (nn::Parameter* p : m.parameters()) r.grads.push_back(bits(p->grad()));
  // An inference pass: the same output, nothing kept, whatever the mode.
  nn::Context inference(Device::cpu(), /*save_for_backward=*/false);
  if (key_mask) inference.set_side_input("key_mask", *key_mask);
  EXPECT_EQ(bits(m.forward(inference, x)), r.y) << nn::recompute_name(mode);
  EXPECT_EQ(inference.saved_bytes(), 0) << nn::recompute_name(mode);
  for (auto* hook : {&r.pre_forward, &r.post_forward}) --*hook;  // the inference pass's
  m.set_pre_forward_hook({});
  m.set_post_forward_hook({});
  m.set_pre_backward_hook({});
  m.set_post_backward_hook({});
  m.set_recompute(Recompute::kNone);
  return r;
}

void expect_same_bits(const ModuleRun& got, const ModuleRun& want, const std::string& what) {
  EXPECT_EQ(got.y, want.y) << what << ": output";
  EXPECT_EQ(got.dx, want.dx) << what << ": input gradient";
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (std::size_t i = 0; i < got.grads.size(); ++i) EXPECT_EQ(got.grads[i], want.grads[i]) << what << ": grad " << i;
  // The module's own hooks run once per forward and once per backward: the
  // re-run of a full recomputation calls forward_impl between the backward hooks.
  EXPECT_EQ(got.pre_forward, 1) << what;
  EXPECT_EQ(got.post_forward, 1) << what;
  EXPECT_EQ(got.pre_backward, 1) << what;
  EXPECT_EQ(got.post_backward, 1) << what;
}

TEST(Recompute, NamesParse) {
  for (Recompute m : kModes) EXPECT_EQ(nn::parse_recompute(nn::recompute_name(m)), m);
  EXPECT_TRUE(test::throws_error([] { nn::parse_recompute("attention"); }, ErrorKind::kConfig, {"attention"}));
}

// GPT's block: the same bits under every mode; full keeps the input alone,
// selective keeps the attention's output (saved by the attention and as
// c_proj's input) and its f32 log-sum-exp less than none.
TEST(Recompute, GptBlockSameBitsAndKeepsLess) {
  constexpr std::int64_t b = 2, t = 8, c = 32;
  constexpr int heads = 2;
  std::mt19937 rng(11);
  nn::Block block("h.0", c, heads, Device::cpu());
  randomize(block, rng, 0.3f);
  const Tensor x = test::random_tensor({b, t, c}, rng), dy = test::random_tensor({b, t, c}, rng);
  const ModuleRun none = run_module(block, Recompute::kNone, x, dy, nullptr);
  const ModuleRun selective = run_module(block, Recompute::kSelective, x, dy, nullptr);
  const ModuleRun full = run_module(block, Recompute::kFull, x, dy, nullptr);
  expect_same_bits(selective, none, "selective");
  expect_same_bits(full, none, "full");
  EXPECT_EQ(full.saved_bytes, std::int64_t(x.nbytes()));
  EXPECT_EQ(none.saved_bytes - selective.saved_bytes, 2 * b * t * c * 4 + b * heads * t * 4);
  std::printf("GPT block B%lld T%lld C%lld saves %lld bytes (none), %lld (selective), %lld (full)\n", (long long)b,
              (long long)t, (long long)c, (long long)none.saved_bytes, (long long)selective.saved_bytes,
              (long long)full.saved_bytes);
}

// Grouped-query attention with rotary positions, biases and a key padding
// mask: the full re-run reads the mask from the fresh context (the same side
// inputs), the selective one from what forward kept.
TEST(Recompute, MaskedAttentionSameBitsAndKeepsLess) {
  constexpr std::int64_t b = 2, t = 6, c = 16;
  const nn::AttentionConfig config{
      .dim = c, .n_head = 4, .n_kv_head = 2, .causal = false, .bias = true, .rope_theta = 10000.f, .max_positions = t};
  std::mt19937 rng(12);
  nn::SelfAttention attn("attn", config, Device::cpu());
  randomize(attn, rng, 0.5f);
  const Tensor x = test::random_tensor({b, t, c}, rng), dy = test::random_tensor({b, t, c}, rng);
  const Tensor mask = Tensor::from_vector<std::int32_t>({1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 0, 1}, {b, t});
  const ModuleRun none = run_module(attn, Recompute::kNone, x, dy, &mask);
  const ModuleRun selective = run_module(attn, Recompute::kSelective, x, dy, &mask);
  const ModuleRun full = run_module(attn, Recompute::kFull, x, dy, &mask);
  expect_same_bits(selective, none, "selective");
  expect_same_bits(full, none, "full");
  EXPECT_EQ(full.saved_bytes, std::int64_t(x.nbytes()));
  EXPECT_EQ(none.saved_bytes - selective.saved_bytes, 2 * b * t * c * 4 + b * config.n_head * t * 4);
  // The mask matters: without it the output differs (so the full re-run must have had it).
  nn::Context unmasked(Device::cpu(), false);
  EXPECT_NE(bits(attn.forward(unmasked, x)), none.y);
}

// ---- the engine: GPT and Llama, fp32 and bf16 ---------------------------------

data::TokenSplits text(std::int64_t vocab) {
  data::TokenSplits s;
  s.vocab_size = vocab;
  const std::string phrase = "the quick brown fox jumps over the lazy dog. ";
  for (int i = 0; i < 100; ++i)
    for (char ch : phrase) s.train.push_back(std::int32_t(ch) % std::int32_t(vocab));
  s.val = s.train;
  return s;
}

struct EngineRun {
  std::vector<std::uint32_t> losses, norms;
  std::vector<std::vector<std::uint32_t>> grads;  // every slot's gradient at every step
  std::vector<std::uint32_t> weights;
  std::int64_t activation_peak_bytes = 0;  // the highest over the steps, above what was live before
};

template <typename Engine, typename Options>
EngineRun run_engine(Options o, Recompute mode, std::int64_t vocab, int steps) {
  o.engine.recompute = mode;
  const data::TokenSplits data = text(vocab);
  Engine e(o, data);
  EngineRun r;
  e.engine.add_hooks({.after_gradients = [&](std::int64_t, float&) {
    for (const optim::Slot& s : e.engine.optimizer().slots()) r.grads.push_back(bits(s.grad));
  }});
  for (int i = 0; i < steps; ++i) {
    const std::int64_t before = memory_stats(DeviceType::kCPU, MemCategory::kActivations).current_bytes;
    reset_memory_peaks();
    const train::StepStats s = e.engine.step();
    r.activation_peak_bytes = std::max<std::int64_t>(
        r.activation_peak_bytes, memory_stats(DeviceType::kCPU, MemCategory::kActivations).peak_bytes - before);
    r.losses.push_back(std::bit_cast<std::uint32_t>(s.loss));
    r.norms.push_back(std::bit_cast<std::uint32_t>(s.grad_norm));
  }
  for (const auto& [name, w] : e.engine.full_parameters())
    for (std::uint32_t v : bits(w)) r.weights.push_back(v);
  return r;
}

template <typename Engine, typename Options>
void expect_recompute_changes_no_bits(const Options& o, std::int64_t vocab, const char* model) {
  constexpr int kSteps = 3;
  const EngineRun none = run_engine<Engine>(o, Recompute::kNone, vocab, kSteps);
  const EngineRun selective = run_engine<Engine>(o, Recompute::kSelective, vocab, kSteps);
  const EngineRun full = run_engine<Engine>(o, Recompute::kFull, vocab, kSteps);
  ASSERT_FALSE(none.grads.empty());
  for (const auto& [run, name] : {std::pair{&selective, "selective"}, std::pair{&full, "full"}}) {
    EXPECT_EQ(run->losses, none.losses) << model << " " << name << ": losses";
    EXPECT_EQ(run->norms, none.norms) << model << " " << name << ": gradient norms";
    ASSERT_EQ(run->grads.size(), none.grads.size());
    for (std::size_t i = 0; i < none.grads.size(); ++i)
      EXPECT_EQ(run->grads[i], none.grads[i]) << model << " " << name << ": slot " << i % (none.grads.size() / kSteps)
                                              << " of step " << i / (none.grads.size() / kSteps) + 1;
    EXPECT_EQ(run->weights, none.weights) << model << " " << name << ": final weights";
  }
  // A step's activation peak: selective keeps one (B, T, C) activation and
  // an lse less per block, full only each block's input.
  EXPECT_LT(selective.activation_peak_bytes, none.activation_peak_bytes) << model;
  EXPECT_LT(full.activation_peak_bytes, selective.activation_peak_bytes) << model;
  EXPECT_LT(double(full.activation_peak_bytes), 0.75 * double(none.activation_peak_bytes)) << model;
  std::printf("%s: activation peak %lld bytes (none), %lld (selective, %.2fx), %lld (full, %.2fx)\n", model,
              (long long)none.activation_peak_bytes, (long long)selective.activation_peak_bytes,
              double(selective.activation_peak_bytes) / double(none.activation_peak_bytes),
              (long long)full.activation_peak_bytes,
              double(full.activation_peak_bytes) / double(none.activation_peak_bytes));
}

// Blocks wide and many enough next to the vocabulary that they hold most of
// a step's activations, as in a real model; two accumulated micro-batches.
test::GPTRunOptions gpt_options(DType compute) {
  test::GPTRunOptions o = test::tiny_gpt_options(3);
  o.model = {.vocab_size = 64, .context = 32, .n_layer = 4, .n_head = 2, .n_embd = 64};
  o.seq_len = 32;
  o.engine.layout.grad_accum = 2;
  o.engine.eval_samples = 0;
  o.engine.precision.compute = compute;
  return o;
}

test::LlamaRunOptions llama_options(DType compute) {
  const test::GPTRunOptions g = gpt_options(compute);
  test::LlamaRunOptions o;
  o.model = {.vocab_size = 64, .context = 32, .n_layer = 4, .n_head = 4, .n_kv_head = 2, .n_embd = 64,
             .ffn_hidden = 96};
  o.seq_len = g.seq_len;
  o.engine = g.engine;
  return o;
}

TEST(Recompute, GptEngineSameBitsFp32) {
  expect_recompute_changes_no_bits<test::GPTEngine>(gpt_options(DType::kF32), 64, "GPT fp32");
}
TEST(Recompute, GptEngineSameBitsBf16) {
  expect_recompute_changes_no_bits<test::GPTEngine>(gpt_options(DType::kBF16), 64, "GPT bf16");
}
TEST(Recompute, LlamaEngineSameBitsFp32) {
  expect_recompute_changes_no_bits<test::LlamaEngine>(llama_options(DType::kF32), 64, "Llama fp32");
}
TEST(Recompute, LlamaEngineSameBitsBf16) {
  expect_recompute_changes_no_bits<test::LlamaEngine>(llama_options(DType::kBF16), 64, "Llama bf16");
}

// What a whole model keeps after forward_loss, in one process: selective
// drops the attention output (twice counted: the attention's and c_proj's
// entry) and lse of every block, full leaves each block its input alone;
// the embedding, final norm, head and loss keep what they kept.
TEST(Recompute, GptModelKeepsTheExpectedBytes) {
  const models::GPTConfig config{.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 2, .n_embd = 32};
  constexpr std::int64_t b = 2, t = 16;
  models::GPT gpt(config);
  gpt.init_weights(5);
  std::vector<std::int32_t> ids(std::size_t(b * t));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((7 * i + 3) % 64);
  const Tensor tokens = Tensor::from_vector(ids, {b, t});
  std::int64_t saved[3] = {};
  for (Recompute mode : kModes) {
    gpt.set_recompute(mode);
    nn::Context ctx;
    gpt.forward_loss(ctx, tokens, tokens);
    saved[int(mode)] = ctx.saved_bytes();
    gpt.backward_loss(ctx);
  }
  // One block's bytes under none, from a block of the same size on its own.
  nn::Block block("h", config.n_embd, config.n_head, Device::cpu());
  std::mt19937 rng(1);
  randomize(block, rng, 0.1f);
  nn::Context one;
  block.forward(one, test::random_tensor({b, t, config.n_embd}, rng));
  const std::int64_t block_bytes = one.saved_bytes(), input_bytes = b * t * config.n_embd * 4;
  const std::int64_t layers = config.n_layer;
  EXPECT_EQ(saved[0] - saved[1], layers * (2 * input_bytes + b * config.n_head * t * 4));
  EXPECT_EQ(saved[0] - saved[2], layers * (block_bytes - input_bytes));
  std::printf("GPT L3 C32 B2 T16 keeps %lld bytes (none), %lld (selective), %lld (full); a block %lld of them\n",
              (long long)saved[0], (long long)saved[1], (long long)saved[2], (long long)block_bytes);
}

TEST(Recompute, TheDefaultModelRuleRecomputesCompositeChildrenOnly) {
  // A GPT seen as a plain nn::Model: its blocks have children, its
  // embedding, final norm and head do not.
  models::GPT gpt({.vocab_size = 16, .context = 8, .n_layer = 2, .n_head = 2, .n_embd = 8});
  gpt.nn::Model::set_recompute(Recompute::kFull);
  for (nn::Module* c : gpt.children())
    EXPECT_EQ(c->recompute(), c->children().empty() ? Recompute::kNone : Recompute::kFull) << c->name();
  EXPECT_EQ(gpt.recompute(), Recompute::kNone);
  EXPECT_EQ(gpt.block(0).attn().recompute(), Recompute::kNone);  // saves all during the block's re-run
  gpt.set_recompute(Recompute::kSelective);
  EXPECT_EQ(gpt.block(1).attn().recompute(), Recompute::kSelective);
  EXPECT_EQ(gpt.block(1).recompute(), Recompute::kSelective);
}

TEST(Recompute, EngineOptionIsValidated) {
  train::EngineOptions o;
  o.recompute = Recompute(7);
  EXPECT_TRUE(test::throws_error([&] { o.validate(); }, ErrorKind::kConfig, {"recompute"}));
}

}  // namespace
}  // namespace ht
