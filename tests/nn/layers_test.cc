// Backward of every layer and of the whole GPT against central finite
// differences of its own forward, a layer run twice in one forward (its
// saved contexts stacked), plus the hooks and naming contracts that the
// parallel wrappers rely on.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "ht/core/memory.h"
#include "ht/models/gpt.h"
#include "ht/nn/model_chunks.h"
#include "test_util.h"

namespace ht::nn {
namespace {

using models::GPT;
using models::GPTConfig;
using test::all_close;

// Fills every parameter of `m` with uniform values in [-scale, scale]
// (LayerNorm gains around 1), deterministically.
void randomize(Module& m, std::mt19937& rng, float scale = 0.5f) {
  for (Parameter* p : m.parameters()) {
    const bool gain = p->name().find("ln") != std::string::npos && p->name().find("weight") != std::string::npos;
    Tensor v = test::random_tensor(p->data().shape(), rng, gain ? 1.f - scale : -scale, gain ? 1.f + scale : scale);
    p->data().copy_from(v);
  }
}

double dot(const Tensor& a, const std::vector<float>& w) {
  const auto v = a.to_vector<float>();
  double s = 0.0;
  for (std::size_t i = 0; i < v.size(); ++i) s += double(v[i]) * double(w[i]);
  return s;
}

// Checks d(sum(w * module(x)))/d(theta) for the input (if it has a gradient)
// and every parameter, at up to `samples` coordinates each, against central
// differences of the f32 forward with step h.
void check_module(Module& m, const Tensor& x, bool input_has_grad, std::mt19937& rng, double rtol = 2e-2,
                  float h = 1e-2f, int samples = 12) {
  Context ctx;
  const Tensor y = m.forward(ctx, x);
  const auto w = test::random_floats(std::size_t(y.numel()), rng);
  m.zero_grad();
  const Tensor dx = m.backward(ctx, Tensor::from_vector(w, y.shape()));

  auto objective = [&] {
    Context c(Device::cpu(), false);
    return dot(m.forward(c, x), w);
  };
  auto check_tensor = [&](Tensor values, const Tensor& grad, const std::string& what) {
    std::vector<float> got;
    std::vector<double> want;
    const auto g = grad.to_vector<float>();
    std::uniform_int_distribution<std::int64_t> pick(0, values.numel() - 1);
    for (int s = 0; s < samples && values.numel() > 0; ++s) {
      const std::int64_t i = pick(rng);
      float* v = values.data<float>() + i;
      const float saved = *v;
      *v = saved + h;
      const double fp = objective();
      *v = saved - h;
      const double fm = objective();
      *v = saved;
      want.push_back((fp - fm) / (2.0 * double(h)));
      got.push_back(g[std::size_t(i)]);
    }
    EXPECT_TRUE(all_close(got, want, rtol, 1e-3)) << what;
  };
  if (input_has_grad) {
    ASSERT_TRUE(dx.defined());
    check_tensor(x, dx, "input");
  }
  for (Parameter* p : m.parameters()) check_tensor(p->data(), p->grad(), p->name());
}

TEST(LayerGrad, Linear) {
  std::mt19937 rng(1);
  Linear lin("lin", 7, 5, true, Device::cpu());
  randomize(lin, rng);
  check_module(lin, test::random_tensor({2, 3, 7}, rng), true, rng);
}

TEST(LayerGrad, LinearWithoutBias) {
  std::mt19937 rng(2);
  Linear lin("lin", 4, 9, false, Device::cpu());
  randomize(lin, rng);
  EXPECT_EQ(lin.parameters().size(), 1u);
  check_module(lin, test::random_tensor({5, 4}, rng), true, rng);
}

TEST(LayerGrad, LayerNorm) {
  std::mt19937 rng(3);
  LayerNorm ln("ln", 11, Device::cpu());
  randomize(ln, rng);
  check_module(ln, test::random_tensor({3, 2, 11}, rng, -2.f, 2.f), true, rng);
}

TEST(LayerGrad, CausalSelfAttention) {
  std::mt19937 rng(4);
  CausalSelfAttention attn("attn", 12, 3, Device::cpu());
  randomize(attn, rng);
  check_module(attn, test::random_tensor({2, 5, 12}, rng), true, rng);
}

TEST(LayerGrad, MLP) {
  std::mt19937 rng(5);
  MLP mlp("mlp", 6, 24, Device::cpu());
  randomize(mlp, rng);
  check_module(mlp, test::random_tensor({2, 3, 6}, rng), true, rng);
}

TEST(LayerGrad, Block) {
  std::mt19937 rng(6);
  Block block("h.0", 8, 2, Device::cpu());
  randomize(block, rng, 0.3f);
  check_module(block, test::random_tensor({2, 4, 8}, rng), true, rng);
}

TEST(LayerGrad, Embedding) {
  std::mt19937 rng(7);
  Embedding emb("emb", 10, 6, 4, Device::cpu());
  randomize(emb, rng);
  // Repeated ids: their gradients must add up.
  const Tensor tokens = Tensor::from_vector<std::int32_t>({1, 3, 1, 9, 0, 1, 3, 2}, {2, 4});
  Context ctx;
  const Tensor y = emb.forward(ctx, tokens);
  const auto w = test::random_floats(std::size_t(y.numel()), rng);
  emb.zero_grad();
  EXPECT_FALSE(emb.backward(ctx, Tensor::from_vector(w, y.shape())).defined());
  // Linear in the weights: the gradient is exact, compare with the sum directly.
  std::vector<double> want(10 * 4, 0.0);
  for (int i = 0; i < 8; ++i)
    for (int c = 0; c < 4; ++c) want[std::size_t(tokens.data<std::int32_t>()[i] * 4 + c)] += w[std::size_t(i * 4 + c)];
  EXPECT_TRUE(all_close(emb.token_weight().grad().to_vector<float>(), want, 1e-6));
}

// One square Linear applied twice in one forward: y = lin(lin(x)).
class LinearTwice : public Module {
 public:
  explicit LinearTwice(std::int64_t dim) : Module("twice") {
    lin_ = &add_module(std::make_unique<Linear>("lin", dim, dim, true, Device::cpu()));
  }
  Linear& lin() { return *lin_; }

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& x) override { return lin_->forward(ctx, lin_->forward(ctx, x)); }
  Tensor backward_impl(Context& ctx, const Tensor& dy) override { return lin_->backward(ctx, lin_->backward(ctx, dy)); }

 private:
  Linear* lin_;
};

// A module run twice in one forward keeps both runs' saved tensors (a stack
// per module in the Context); each backward takes the newest and pops it, so
// the shared weights' gradients are the sum of the two uses' gradients.
TEST(LayerGrad, ALinearUsedTwiceSumsBothUsesGradients) {
  std::mt19937 rng(9);
  LinearTwice twice(6);
  randomize(twice, rng);
  const Tensor x = test::random_tensor({2, 3, 6}, rng);
  // Against finite differences of the composite, for the input and both parameters.
  check_module(twice, x, true, rng);

  // Against the analytic reference: two separate Linears with the same
  // values, one per use; the shared gradient is the sum of theirs.
  Linear first("first", 6, 6, true, Device::cpu()), second("second", 6, 6, true, Device::cpu());
  for (Linear* l : {&first, &second}) {
    l->weight().data().copy_from(twice.lin().weight().data());
    l->bias()->data().copy_from(twice.lin().bias()->data());
  }
  Context ctx, ref;
  const Tensor y = twice.forward(ctx, x);
  EXPECT_EQ(ctx.saved_bytes(), std::int64_t(2 * x.nbytes())) << "both runs' inputs are kept";
  const Tensor y_ref = second.forward(ref, first.forward(ref, x));
  EXPECT_EQ(y.to_vector<float>(), y_ref.to_vector<float>());
  const Tensor dy = test::random_tensor(y.shape(), rng);
  twice.zero_grad();
  int ready = 0;
  twice.lin().weight().set_uses(2);
  twice.lin().weight().set_grad_ready_hook([&](Parameter&) { ++ready; });
  const Tensor dx = twice.backward(ctx, dy);
  EXPECT_EQ(ctx.saved_bytes(), 0) << "each use's backward popped its own entry";
  EXPECT_EQ(ready, 1) << "a weight used twice is ready once, after its second contribution";
  const Tensor dx_ref = first.backward(ref, second.backward(ref, dy));
  EXPECT_TRUE(all_close(dx.to_vector<float>(), test::to_double(dx_ref), 1e-6)) << "input gradient";
  auto sum = [](const Tensor& a, const Tensor& b) {
    std::vector<double> s = test::to_double(a);
    const std::vector<double> t = test::to_double(b);
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += t[i];
    return s;
  };
  EXPECT_TRUE(all_close(twice.lin().weight().grad().to_vector<float>(),
                        sum(first.weight().grad(), second.weight().grad()), 1e-6))
      << "weight gradient";
  EXPECT_TRUE(all_close(twice.lin().bias()->grad().to_vector<float>(),
                        sum(first.bias()->grad(), second.bias()->grad()), 1e-6))
      << "bias gradient";
  // Both entries are gone: a third backward finds nothing saved.
  EXPECT_TRUE(test::throws_error([&] { twice.lin().backward(ctx, dy); }, ErrorKind::kInvalidArgument,
                                 {"'lin'", "found nothing saved"}));
}

GPTConfig tiny_config() {
  GPTConfig c;
  c.vocab_size = 13;
  c.context = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

TEST(GPTGrad, LossGradientMatchesFiniteDifferences) {
  std::mt19937 rng(8);
  GPT gpt(tiny_config());
  gpt.init_weights(3);
  randomize(gpt, rng, 0.3f);  // larger than GPT-2 init, so every path carries signal
  std::vector<std::int32_t> ids(2 * 6), tg(2 * 6);
  std::uniform_int_distribution<int> tok(0, 12);
  for (auto& t : ids) t = tok(rng);
  for (auto& t : tg) t = tok(rng);
  const Tensor tokens = Tensor::from_vector(ids, {2, 6}), targets = Tensor::from_vector(tg, {2, 6});
  Context ctx;
  gpt.zero_grad();
  gpt.forward_loss(ctx, tokens, targets);
  gpt.backward_loss(ctx);
  for (Parameter* p : gpt.parameters()) {
    std::vector<float> got;
    std::vector<double> want;
    const auto g = p->grad().to_vector<float>();
    std::uniform_int_distribution<std::int64_t> pick(0, p->data().numel() - 1);
    for (int s = 0; s < 8; ++s) {
      const std::int64_t i = pick(rng);
      float* v = p->data().data<float>() + i;
      const float saved = *v;
      const float h = 1e-2f;
      Context c(Device::cpu(), false);
      *v = saved + h;
      const double fp = gpt.forward_loss(c, tokens, targets).value;
      *v = saved - h;
      const double fm = gpt.forward_loss(c, tokens, targets).value;
      *v = saved;
      want.push_back((fp - fm) / (2.0 * h));
      got.push_back(g[std::size_t(i)]);
    }
    EXPECT_TRUE(all_close(got, want, 2e-2, 2e-4)) << p->name();
  }
}

TEST(GPT, ParameterNamesFollowGpt2AndCountsMatchConfig) {
  GPT gpt(tiny_config());
  std::vector<std::string> names;
  for (Parameter* p : gpt.parameters()) names.push_back(p->name());
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names[0], "wte");
  EXPECT_EQ(names[1], "wpe");
  EXPECT_EQ(names[2], "h.0.ln_1.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "h.1.attn.c_attn.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "h.1.mlp.c_proj.bias"), names.end());
  EXPECT_EQ(names.back(), "ln_f.bias");
  EXPECT_EQ(gpt.num_parameters(), tiny_config().num_parameters());
  // No decay on biases and norm gains; decay on matrices and embeddings.
  for (Parameter* p : gpt.parameters())
    EXPECT_EQ(p->weight_decay(), p->data().ndim() == 2) << p->name();
}

TEST(GPT, InitIsDeterministicAndIndependentOfOtherParameters) {
  GPT a(tiny_config()), b(tiny_config());
  a.init_weights(42);
  b.init_weights(42);
  auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i]->data().to_vector<float>(), pb[i]->data().to_vector<float>()) << pa[i]->name();
  // A deeper model shares the first layers' initial values: each parameter's
  // stream depends only on (seed, name).
  GPTConfig deeper = tiny_config();
  deeper.n_layer = 3;
  GPT c(deeper);
  c.init_weights(42);
  EXPECT_EQ(c.block(1).attn().c_attn().weight().data().to_vector<float>(),
            a.block(1).attn().c_attn().weight().data().to_vector<float>());
  b.init_weights(43);
  EXPECT_NE(pa[0]->data().to_vector<float>(), pb[0]->data().to_vector<float>());
}

// Deferred storage: no parameter keeps its values after construction (the
// model is never whole in memory), and each parameter's initial_value() gives exactly what
// init_weights would have written.
TEST(GPT, DeferredStorageHoldsNoValuesAndInitialValueMatchesInit) {
  GPT whole(tiny_config());
  whole.init_weights(42);
  const std::int64_t before = memory_stats(DeviceType::kCPU, MemCategory::kParameters).current_bytes;
  GPT deferred(tiny_config(), Placement{.defer_storage = true});
  EXPECT_EQ(memory_stats(DeviceType::kCPU, MemCategory::kParameters).current_bytes, before);
  auto pw = whole.parameters(), pd = deferred.parameters();
  ASSERT_EQ(pw.size(), pd.size());
  for (std::size_t i = 0; i < pd.size(); ++i) {
    EXPECT_FALSE(pd[i]->data().defined()) << pd[i]->name();
    EXPECT_EQ(pd[i]->shape(), pw[i]->shape()) << pd[i]->name();
    EXPECT_EQ(pd[i]->initial_value(42).to_vector<float>(), pw[i]->data().to_vector<float>())
        << pd[i]->name();
  }
}

// A GPT built for one pipeline stage holds that stage's part under the full
// model's names: the embedding and the first blocks on stage 0; the last
// blocks, the final norm and its own copy of the tied wte on the last. The
// two stages in a row compute what the whole model computes.
TEST(GPT, AStageHoldsItsPartUnderTheFullModelsNames) {
  const GPTConfig c = tiny_config();  // 2 layers: one block per stage
  GPT first(c, Placement{.stage = {.rank = 0, .size = 2}}), last(c, Placement{.stage = {.rank = 1, .size = 2}});
  std::vector<std::string> first_names, last_names;
  for (Parameter* p : first.parameters()) first_names.push_back(p->name());
  for (Parameter* p : last.parameters()) last_names.push_back(p->name());
  ASSERT_GE(first_names.size(), 3u);
  EXPECT_EQ(first_names[0], "wte");
  EXPECT_EQ(first_names[1], "wpe");
  for (std::size_t i = 2; i < first_names.size(); ++i) EXPECT_EQ(first_names[i].rfind("h.0.", 0), 0u) << first_names[i];
  for (const std::string& n : last_names)
    EXPECT_TRUE(n.rfind("h.1.", 0) == 0 || n == "ln_f.weight" || n == "ln_f.bias" || n == "wte") << n;
  EXPECT_NE(std::find(last_names.begin(), last_names.end(), "wte"), last_names.end()) << "the head's copy of wte";
  EXPECT_EQ(first.num_parameters() + last.num_parameters() - c.vocab_size * c.n_embd, c.num_parameters())
      << "the stages hold the model once, plus one copy of wte";
  for (GPT* g : {&first, &last}) {
    const std::vector<TiedWeight> tied = g->tied_weights();
    ASSERT_EQ(tied.size(), 1u);
    EXPECT_EQ(tied[0].name, "wte");
    EXPECT_EQ(tied[0].stages, (std::vector<int>{0, 1}));
  }
  EXPECT_TRUE(GPT(c).tied_weights().empty()) << "one stage ties nothing across stages";
  EXPECT_EQ(last.stage_input_shape({2, 5}), (Shape{2, 5, c.n_embd}));
  EXPECT_TRUE(test::throws_error([&] { first.head(); }, ErrorKind::kInvalidArgument, {"holds no output head"}));
  EXPECT_TRUE(test::throws_error([&] { last.embedding(); }, ErrorKind::kInvalidArgument, {"holds no embedding"}));

  GPT whole(c);
  for (GPT* g : {&first, &last, &whole}) g->init_weights(5);
  const Tensor tokens = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 12, 0}, {1, 6});
  const Tensor targets = Tensor::from_vector<std::int32_t>({2, 3, 4, 12, 0, 7}, {1, 6});
  Context ctx;
  const Tensor activations = first.forward(ctx, tokens);
  EXPECT_EQ(activations.shape(), (Shape{1, 6, c.n_embd}));
  EXPECT_TRUE(test::throws_error([&] { last.forward(ctx, tokens); }, ErrorKind::kShapeMismatch,
                                 {"stage 1", "(B, T, 8)"}))
      << "the last stage takes activations, not tokens";
  const float staged = float(last.forward_loss(ctx, activations, targets).value);
  const float one = float(whole.forward_loss(ctx, tokens, targets).value);
  EXPECT_NEAR(staged, one, 1e-6 * std::abs(one));
}

// Only the last stage computes the loss; the others are told which stage they are.
TEST(GPT, ForwardLossOffTheLastStageIsRefusedNamingTheStage) {
  GPT first(tiny_config(), Placement{.stage = {.rank = 0, .size = 2}});
  first.init_weights(1);
  const Tensor tokens = Tensor::from_vector<std::int32_t>({1, 2, 3, 4}, {1, 4});
  Context ctx;
  EXPECT_TRUE(test::throws_error([&] { first.forward_loss(ctx, tokens, tokens); }, ErrorKind::kInvalidArgument,
                                 {"last pipeline stage", "stage 0 of 2"}));
}

TEST(Hooks, GradReadyFiresOncePerParameterAfterLastUse) {
  GPT gpt(tiny_config());
  gpt.init_weights(1);
  std::vector<std::string> order;
  for (Parameter* p : gpt.parameters()) p->set_grad_ready_hook([&](Parameter& q) { order.push_back(q.name()); });
  int pre_forward = 0, pre_backward = 0;
  gpt.block(1).set_pre_forward_hook([&](Module&, Context&) { ++pre_forward; });
  gpt.block(1).set_pre_backward_hook([&](Module&, Context&) { ++pre_backward; });
  const Tensor tokens = Tensor::from_vector<std::int32_t>({1, 2, 3, 4}, {1, 4});
  Context ctx;
  gpt.zero_grad();
  gpt.forward_loss(ctx, tokens, tokens);
  gpt.backward_loss(ctx);
  EXPECT_EQ(pre_forward, 1);
  EXPECT_EQ(pre_backward, 1);
  EXPECT_EQ(order.size(), gpt.parameters().size());
  // Backward runs from the output: the last block's parameters are ready before
  // the first block's, and the tied wte only after the embedding's contribution.
  auto pos = [&](const std::string& n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  EXPECT_LT(pos("h.1.mlp.c_proj.weight"), pos("h.0.mlp.c_proj.weight"));
  EXPECT_EQ(order.back() == "wte" || order.back() == "wpe", true);
  EXPECT_GT(pos("wte"), pos("h.0.ln_1.weight"));
}

// An interleaved pipeline rank's chunks (nn::ModelChunks): its parameters
// under the whole model's names, its tied weights by rank, and the checks.
TEST(ModelChunks, ARanksChunksAreOneModelOutsideThePipeline) {
  GPTConfig c = tiny_config();
  c.n_layer = 4;  // 4 virtual stages of one block: rank 0 holds 0 and 2, rank 1 holds 1 and 3
  const auto chunks_of = [&](int rank) {
    std::vector<std::unique_ptr<Model>> chunks;
    for (int chunk = 0; chunk < 2; ++chunk)
      chunks.push_back(std::make_unique<GPT>(c, Placement{.stage = {.rank = chunk * 2 + rank, .size = 4}}));
    return chunks;
  };
  ModelChunks first(Placement{.stage = {.rank = 0, .size = 2}}, chunks_of(0));
  ModelChunks last(Placement{.stage = {.rank = 1, .size = 2}}, chunks_of(1));
  std::vector<std::string> names;
  for (Parameter* p : first.parameters()) names.push_back(p->name());
  EXPECT_EQ(names.front(), "wte");
  EXPECT_NE(std::find(names.begin(), names.end(), "h.2.attn.c_attn.weight"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "h.1.attn.c_attn.weight"), names.end());
  EXPECT_EQ(first.chunks().size(), 2u);
  EXPECT_TRUE(first.first_stage() && last.last_stage());
  EXPECT_EQ(first.describe(), GPT(c).describe());
  EXPECT_EQ(first.num_parameters() + last.num_parameters() - c.vocab_size * c.n_embd, c.num_parameters())
      << "the chunks hold the model once, plus the head's copy of wte";
  // Tied across virtual stages 0 and 3: ranks 0 and 1.
  const std::vector<TiedWeight> tied = last.tied_weights();
  ASSERT_EQ(tied.size(), 1u);
  EXPECT_EQ(tied[0].stages, (std::vector<int>{0, 1}));
  EXPECT_EQ(last.stage_input_shape({2, 5}), (Shape{2, 5, c.n_embd}));
  Context ctx;
  EXPECT_TRUE(test::throws_error([&] { last.forward_loss(ctx, Tensor(), Tensor()); }, ErrorKind::kNotSupported,
                                 {"run them through parallel::Pipeline"}));
  // Chunks built for the wrong virtual stages, or a pipeline of one rank.
  EXPECT_TRUE(test::throws_error([&] { ModelChunks(Placement{.stage = {.rank = 1, .size = 2}}, chunks_of(0)); },
                                 ErrorKind::kInvalidArgument, {"chunk 0 of pipeline rank 1", "must be virtual stage 1 of 4"}));
  std::vector<std::unique_ptr<Model>> one;
  one.push_back(std::make_unique<GPT>(c, Placement{.stage = {.rank = 0, .size = 2}}));
  one.push_back(std::make_unique<GPT>(c, Placement{.stage = {.rank = 1, .size = 2}}));
  EXPECT_TRUE(test::throws_error([&] { ModelChunks(Placement{}, std::move(one)); }, ErrorKind::kConfig,
                                 {"at least 2 pipeline ranks"}));
}

// Zero-bubble pipelines split a backward in two (Context::set_defer_weight_grads):
// B leaves the Linear and head weight GEMMs in the context, W runs them.
// Together they give the same input gradient and the same parameter
// gradients in bits, and the deferred weights' grad-ready hooks fire only in W.
TEST(DeferredWeightGrads, BackwardInTwoGivesTheSameGradientsInBits) {
  for (const Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    SCOPED_TRACE(mode == Recompute::kNone ? "no recomputation" : "full recomputation");
    GPTConfig config = tiny_config();
    config.n_layer = 4;
    // The second of two stages: blocks 2 and 3, the final norm and the head.
    GPT gpt(config, {.stage = {.rank = 1, .size = 2}});
    gpt.init_weights(4);
    gpt.set_recompute(mode);
    std::mt19937 rng(6);
    const Tensor x = test::random_tensor({2, 6, config.n_embd}, rng, -1.f, 1.f);
    const Tensor targets = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 6});
    auto grads = [&] {
      std::vector<std::vector<float>> out;
      for (Parameter* p : gpt.parameters()) out.push_back(p->grad().to_vector<float>());
      return out;
    };
    gpt.zero_grad();
    Context fused;
    gpt.forward_loss(fused, x, targets);
    const std::vector<float> dx_fused = gpt.backward_loss(fused).to_vector<float>();
    const auto want = grads();

    std::vector<std::string> ready;
    for (Parameter* p : gpt.parameters()) p->set_grad_ready_hook([&](Parameter& q) { ready.push_back(q.name()); });
    gpt.zero_grad();
    Context split;
    gpt.forward_loss(split, x, targets);
    split.set_defer_weight_grads(true);
    const std::vector<float> dx_split = gpt.backward_loss(split).to_vector<float>();
    EXPECT_EQ(dx_split, dx_fused) << "B's input gradient";
    // Deferred: each block's four Linear weights and the head's.
    EXPECT_EQ(split.pending_weight_grads(), std::size_t(4 * 2 + 1));
    EXPECT_GT(split.saved_bytes(), 0) << "the deferred GEMMs' inputs are still held";
    EXPECT_EQ(std::count(ready.begin(), ready.end(), "h.3.attn.c_attn.weight"), 0);
    EXPECT_EQ(std::count(ready.begin(), ready.end(), "h.3.ln_1.weight"), 1) << "norm gains stay in B";
    EXPECT_TRUE(test::throws_error([&] { split.set_defer_weight_grads(false); }, ErrorKind::kInvalidArgument,
                                   {"9 deferred weight gradients are still to run"}));
    split.run_weight_grads();
    EXPECT_EQ(split.pending_weight_grads(), 0u);
    EXPECT_EQ(std::count(ready.begin(), ready.end(), "h.3.attn.c_attn.weight"), 1);
    EXPECT_EQ(ready.size(), gpt.parameters().size());
    const auto got = grads();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << gpt.parameters()[i]->name() << ": W's gradient";
  }
}

// Gradients of `m` after one forward_loss and backward_loss on (tokens, targets).
std::vector<std::vector<float>> loss_grads(GPT& m, const Tensor& tokens, const Tensor& targets, float* loss) {
  Context ctx;
  *loss = float(m.forward_loss(ctx, tokens, targets).value);
  m.backward_loss(ctx);
  std::vector<std::vector<float>> out;
  for (Parameter* p : m.parameters()) out.push_back(p->grad().to_vector<float>());
  return out;
}

TEST(Parameter, ADiscardedGradientIsOverwrittenByTheNextBackwardAndReadsAsZeroWithout) {
  std::mt19937 rng(5);
  GPT gpt(tiny_config());
  gpt.init_weights(2);
  randomize(gpt, rng, 0.3f);
  const Tensor tokens = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor targets = Tensor::from_vector<std::int32_t>({2, 3, 4, 5, 6, 7}, {2, 3});
  float loss = 0.f;
  gpt.zero_grad();
  const auto zeroed = loss_grads(gpt, tokens, targets, &loss);
  // Discarded, not zeroed: the GEMM-written gradients (beta 0) and the tied
  // wte (head overwrites, embedding adds) come out the same, bit for bit.
  gpt.discard_grads();
  const auto discarded = loss_grads(gpt, tokens, targets, &loss);
  ASSERT_EQ(zeroed.size(), discarded.size());
  for (std::size_t i = 0; i < zeroed.size(); ++i) EXPECT_EQ(zeroed[i], discarded[i]) << gpt.parameters()[i]->name();
  // Without a discard the next backward adds: twice the gradient.
  const auto twice = loss_grads(gpt, tokens, targets, &loss);
  for (std::size_t i = 0; i < zeroed.size(); ++i)
    for (std::size_t j = 0; j < zeroed[i].size(); ++j) ASSERT_FLOAT_EQ(twice[i][j], 2.f * zeroed[i][j]);
  // A discarded gradient that gets no contribution reads as zero.
  gpt.discard_grads();
  for (Parameter* p : gpt.parameters())
    for (float g : p->grad().to_vector<float>()) ASSERT_EQ(g, 0.f) << p->name();
}

GPTConfig padded(GPTConfig c, std::int64_t multiple) {
  c.vocab_multiple = multiple;
  return c;
}

TEST(GPT, APaddedVocabularyGivesTheSameLossAndGradientsAsTheUnpaddedModel) {
  const GPTConfig plain = tiny_config();     // 13 ids
  const GPTConfig pad = padded(plain, 8);    // stored as 16 rows
  EXPECT_EQ(pad.padded_vocab_size(), 16);
  EXPECT_EQ(pad.str(), "L2 H2 C8 V13 Vp16 T8");
  EXPECT_EQ(pad.num_parameters(), plain.num_parameters() + 3 * plain.n_embd);
  EXPECT_EQ(pad.flops_per_token(8), plain.flops_per_token(8));
  GPT a(plain), b(pad);
  EXPECT_EQ(b.padded_vocab_size(), 16);
  EXPECT_EQ(b.embedding().token_weight().shape(), (Shape{16, 8}));
  // The same seed draws the same real rows; the padding rows start at zero.
  a.init_weights(4);
  b.init_weights(4);
  const auto wa = a.embedding().token_weight().data().to_vector<float>();
  const auto wb = b.embedding().token_weight().data().to_vector<float>();
  EXPECT_TRUE(std::equal(wa.begin(), wa.end(), wb.begin()));
  EXPECT_TRUE(std::all_of(wb.begin() + std::ptrdiff_t(wa.size()), wb.end(), [](float v) { return v == 0.f; }));
  // Other values on the real rows, and large ones on the padding rows: the
  // loss must not see them.
  std::mt19937 rng(6);
  randomize(a, rng, 0.3f);
  const auto pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> v = pa[i]->data().to_vector<float>();
    if (pb[i]->data().numel() != pa[i]->data().numel()) v.resize(std::size_t(pb[i]->data().numel()), 3.f);
    pb[i]->data().copy_from(Tensor::from_vector(v, pb[i]->data().shape()));
  }
  const Tensor tokens = Tensor::from_vector<std::int32_t>({0, 5, 12, 7, 3, 11, 2, 9}, {2, 4});
  const Tensor targets = Tensor::from_vector<std::int32_t>({12, 1, 4, 0, 8, 12, 6, 10}, {2, 4});
  float la = 0.f, lb = 0.f;
  a.zero_grad();
  b.zero_grad();
  const auto ga = loss_grads(a, tokens, targets, &la);
  const auto gb = loss_grads(b, tokens, targets, &lb);
  EXPECT_NEAR(lb, la, 1e-6 * std::abs(la));
  for (std::size_t i = 0; i < ga.size(); ++i) {
    std::vector<double> want(ga[i].begin(), ga[i].end());
    std::vector<float> got(gb[i].begin(), gb[i].begin() + std::ptrdiff_t(ga[i].size()));
    EXPECT_TRUE(all_close(got, want, 1e-5, 1e-7)) << pa[i]->name();
    // The padding rows get no gradient.
    for (std::size_t j = ga[i].size(); j < gb[i].size(); ++j) ASSERT_EQ(gb[i][j], 0.f) << pb[i]->name();
  }
  // A target among the padding ids is outside the vocabulary.
  Context ctx;
  const Tensor pad_target = Tensor::from_vector<std::int32_t>({13}, {1, 1});
  EXPECT_TRUE(test::throws_error(
      [&] { b.forward_loss(ctx, Tensor::from_vector<std::int32_t>({1}, {1, 1}), pad_target); },
      ErrorKind::kOutOfRange, {"13"}));
}

TEST(GPT, GenerateNeverSamplesAPaddingId) {
  GPT gpt(padded(tiny_config(), 16));  // 13 ids in 16 rows
  gpt.init_weights(7);
  // Padding rows that would win every argmax (the head is tied to wte).
  Tensor& wte = gpt.embedding().token_weight().data();
  std::vector<float> v = wte.to_vector<float>();
  for (std::size_t i = 13 * 8; i < v.size(); ++i) v[i] = 50.f;
  wte.copy_from(Tensor::from_vector(v, wte.shape()));
  Rng rng(11);
  for (float temperature : {0.f, 1.f, 5.f}) {
    const std::vector<std::int32_t> out = gpt.generate({1, 2, 3}, 24, temperature, rng);
    ASSERT_EQ(out.size(), 24u);
    for (std::int32_t id : out) ASSERT_TRUE(id >= 0 && id < 13) << "id " << id << " at temperature " << temperature;
  }
}

TEST(Errors, BadInputsSayWhatIsWrong) {
  EXPECT_TRUE(test::throws_error([] { GPTConfig c = tiny_config(); c.n_head = 3; c.validate(); },
                                 ErrorKind::kConfig, {"n_head=3", "n_embd=8", "1,2,4,8"}));
  GPT gpt(tiny_config());
  gpt.init_weights(1);
  Context ctx;
  const Tensor bad_ids = Tensor::from_vector<std::int32_t>({1, 13}, {1, 2});
  EXPECT_TRUE(test::throws_error([&] { gpt.forward_loss(ctx, bad_ids, bad_ids); }, ErrorKind::kOutOfRange, {"13"}));
  const Tensor too_long = Tensor::zeros({1, 9}, DType::kI32);
  EXPECT_TRUE(test::throws_error([&] { gpt.forward(ctx, too_long); }, ErrorKind::kShapeMismatch, {"context 8"}));
  const Tensor floats = Tensor::zeros({1, 4}, DType::kF32);
  EXPECT_TRUE(test::throws_error([&] { gpt.forward(ctx, floats); }, ErrorKind::kShapeMismatch, {"i32"}));
  Linear lin("lin", 4, 2, true, Device::cpu());
  EXPECT_TRUE(test::throws_error([&] { lin.forward(ctx, Tensor::zeros({3, 5}, DType::kF32)); },
                                 ErrorKind::kShapeMismatch, {"lin", "4 features"}));
  Context fresh;
  EXPECT_TRUE(test::throws_error([&] { lin.backward(fresh, Tensor::zeros({3, 2}, DType::kF32)); },
                                 ErrorKind::kInvalidArgument, {"lin", "forward"}));
}

}  // namespace
}  // namespace ht::nn
