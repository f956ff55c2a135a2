// nn::MoE for moe_torch_check.py, which computes the same layer with
// PyTorch from the same weights and tokens: each case runs the layer's
// forward, then its backward from a seeded upstream gradient with the
// auxiliary losses' gradient scaled by aux_scale, and writes everything.
//
// File layout: /x (B, T, dim), /dout, /out, /dx; /params/<name> and
// /grads/<name>; /choice (N, top_k) i32 in order of score;
// /tokens_per_expert (E) i32, the choices each expert took; /dropped (1) i32,
// those past capacity; /aux_loss, /z_loss (coefficients included); /bias
// (E) the routing bias;
// the options and aux_scale as attributes of the root group.
#include <random>

#include "ht/nn/moe.h"
#include "reference_export.h"

namespace ht::test {
namespace {

struct MoECase {
  const char* name;
  nn::MoEOptions options;
  std::int64_t batch, seq;
  std::vector<float> bias = {};  // the experts' routing bias; empty: none
};

// Mixtral (softmax, top 2 of 8, renormalised), DeepSeek (sigmoid, top 3 of
// 6, renormalised, 2 shared experts), Switch (softmax, top 1 of 4, as
// scored; 3 tokens, so at least one expert gets none).
const MoECase kCases[] = {
    {"mixtral", {.dim = 16, .hidden = 24, .experts = 8, .top_k = 2, .aux_loss_coeff = 0.01f, .z_loss_coeff = 0.001f},
     2, 6},
    {"deepseek",
     {.dim = 16,
      .hidden = 12,
      .experts = 6,
      .top_k = 3,
      .score = nn::RouterScore::kSigmoid,
      .shared_experts = 2,
      .aux_loss_coeff = 0.02f},
     3, 4},
    {"switch", {.dim = 8, .hidden = 16, .experts = 4, .top_k = 1, .renormalize = false, .aux_loss_coeff = 0.01f}, 1,
     3},
    // Capacity 0.5: each expert takes at most ceil(0.5 x 8 x 2 / 4) = 2 of
    // a sequence's 16 choices, so most sequences drop some.
    {"capacity",
     {.dim = 8, .hidden = 12, .experts = 4, .top_k = 2, .aux_loss_coeff = 0.01f, .capacity_factor = 0.5f},
     3,
     8},
    // DeepSeek-V3's balancing: a routing bias large enough to change
    // choices (chosen by score + bias, weighted by the score alone).
    {"bias",
     {.dim = 16,
      .hidden = 12,
      .experts = 6,
      .top_k = 2,
      .score = nn::RouterScore::kSigmoid,
      .shared_experts = 1,
      .bias_update_rate = 0.001f},
     2,
     6,
     {0.3f, -0.2f, 0.f, 0.15f, -0.35f, 0.05f}},
};

Tensor normal(const Shape& shape, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.f, scale);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

void run(const MoECase& c, const std::string& path) {
  const nn::MoEOptions& o = c.options;
  nn::MoE moe("moe", o, Device::cpu());
  if (!c.bias.empty()) moe.set_expert_bias(c.bias);
  std::mt19937 rng(1234);
  // Weights of about unit gain, so that routing scores are far apart
  // (the library's small initial router would put them within rounding).
  for (nn::Parameter* p : moe.parameters())
    p->data().copy_from(normal(p->data().shape(), rng, 1.f / std::sqrt(float(p->data().size(-1)))));
  const Tensor x = normal({c.batch, c.seq, o.dim}, rng, 1.f);
  const Tensor dout = normal({c.batch, c.seq, o.dim}, rng, 1.f);
  const float aux_scale = 0.5f;
  nn::Context ctx;
  ctx.set_aux_loss_grad_scale(aux_scale);
  moe.zero_grad();
  const Tensor out = moe.forward(ctx, x);
  const Tensor dx = moe.backward(ctx, dout);

  ReferenceWriter w(path);
  w.attr("dim", double(o.dim));
  w.attr("hidden", double(o.hidden));
  w.attr("experts", double(o.experts));
  w.attr("top_k", double(o.top_k));
  w.attr("sigmoid", o.score == nn::RouterScore::kSigmoid ? 1.0 : 0.0);
  w.attr("renormalize", o.renormalize ? 1.0 : 0.0);
  w.attr("shared_experts", double(o.shared_experts));
  w.attr("aux_loss_coeff", double(o.aux_loss_coeff));
  w.attr("z_loss_coeff", double(o.z_loss_coeff));
  w.attr("capacity_factor", double(o.capacity_factor));
  w.attr("aux_scale", double(aux_scale));
  w.write("bias", Tensor::from_vector(moe.expert_bias(), {o.experts}));
  w.write("x", x);
  w.write("dout", dout);
  w.write("out", out);
  w.write("dx", dx);
  for (nn::Parameter* p : moe.parameters()) {
    w.write("params/" + p->name(), p->data());
    w.write("grads/" + p->name(), p->grad());
  }
  const nn::MoERouting& r = moe.last_routing();
  std::vector<std::int32_t> counts(r.tokens_per_expert.begin(), r.tokens_per_expert.end());
  w.write("choice", Tensor::from_vector(r.choice, {std::int64_t(r.choice.size()) / o.top_k, o.top_k}));
  w.write("tokens_per_expert", Tensor::from_vector(counts, {std::int64_t(counts.size())}));
  w.write_scalar("aux_loss", r.aux_loss);
  w.write("dropped", Tensor::from_vector(std::vector<std::int32_t>{std::int32_t(r.dropped)}, {1}));
  w.write_scalar("z_loss", r.z_loss);
}

}  // namespace
}  // namespace ht::test

int main(int argc, char** argv) {
  std::vector<std::string> names;
  for (const auto& c : ht::test::kCases) names.push_back(c.name);
  return ht::test::reference_export_main(argc, argv, "moe_reference_export", names,
                                         [](const std::string& name, const std::string& path) {
                                           for (const auto& c : ht::test::kCases)
                                             if (name == c.name) ht::test::run(c, path);
                                         });
}
