// ht::models::Llama: blocks, assembly and initialisation.
#include "ht/models/llama.h"

#include <algorithm>

#include "ht/nn/embedding.h"
#include "ht/nn/moe.h"
#include "ht/nn/lm_head.h"
#include "ht/nn/rms_norm.h"
#include "ht/nn/self_attention.h"
#include "ht/nn/swiglu_mlp.h"
#include "ht/ops/elementwise.h"
#include "ht/parallel/tables.h"

namespace ht::models {
namespace {

// One pre-norm block: x = x + attn(norm(x)); x = x + mlp(norm(x)). The unit
// ZeRO-3 gathers and frees as a whole.
class LlamaBlock : public nn::Module {
 public:
  LlamaBlock(std::string name, const LlamaConfig& c, bool moe, Device device, nn::TensorParallel tp,
             nn::ContextParallel cp, nn::ExpertParallel ep)
      : Module(std::move(name)) {
    attn_norm_ = &add_module(std::make_unique<nn::RMSNorm>("input_layernorm", c.n_embd, device, c.norm_eps));
    attn_ = &add_module(std::make_unique<nn::SelfAttention>(
        "self_attn",
        nn::AttentionConfig{.dim = c.n_embd,
                            .n_head = c.n_head,
                            .n_kv_head = c.n_kv_head,
                            .causal = true,
                            .bias = false,
                            .qkv_bias = c.qkv_bias,
                            .rope_theta = c.rope_theta,
                            .rope_scaling = c.rope_scaling,
                            .max_positions = c.context},
        device, tp, cp));
    mlp_norm_ = &add_module(std::make_unique<nn::RMSNorm>("post_attention_layernorm", c.n_embd, device, c.norm_eps));
    // The experts are not split over tp: each tp rank runs its experts on
    // the whole (replicated) input, as the norms; they are split over ep.
    if (moe)
      mlp_ = &add_module(std::make_unique<nn::MoE>("mlp",
                                                   nn::MoEOptions{.dim = c.n_embd,
                                                                  .hidden = c.ffn_hidden,
                                                                  .experts = c.experts,
                                                                  .top_k = c.top_k,
                                                                  .shared_experts = c.shared_experts,
                                                                  .aux_loss_coeff = c.moe_aux_loss_coeff,
                                                                  .z_loss_coeff = c.moe_z_loss_coeff,
                                                                  .capacity_factor = c.moe_capacity_factor,
                                                                  .bias_update_rate = c.moe_bias_update_rate},
                                                   device, ep));
    else
      mlp_ = &add_module(std::make_unique<nn::SwiGLUMLP>("mlp", c.n_embd, c.ffn_hidden, device, tp));
  }

 protected:
  Tensor forward_impl(nn::Context& ctx, const Tensor& x) override {
    Tensor a = attn_->forward(ctx, attn_norm_->forward(ctx, x));
    ops::add(x, a, a);
    Tensor m = mlp_->forward(ctx, mlp_norm_->forward(ctx, a));
    ops::add(a, m, m);
    return m;
  }
  Tensor backward_impl(nn::Context& ctx, const Tensor& dy) override {
    // Each residual branch passes dy through unchanged and adds its own gradient.
    Tensor d = mlp_norm_->backward(ctx, mlp_->backward(ctx, dy));
    ops::add(d, dy, d);
    Tensor d2 = attn_norm_->backward(ctx, attn_->backward(ctx, d));
    ops::add(d2, d, d2);
    return d2;
  }

 private:
  nn::RMSNorm* attn_norm_;
  nn::SelfAttention* attn_;
  nn::RMSNorm* mlp_norm_;
  nn::Module* mlp_;  // nn::SwiGLUMLP, or nn::MoE
};

}  // namespace

void LlamaConfig::validate() const {
  HT_CHECK(vocab_size > 0 && context > 0 && n_layer > 0 && n_head > 0 && n_kv_head > 0 && n_embd > 0 &&
               ffn_hidden > 0 && rope_theta > 0.f && norm_eps > 0.f && vocab_multiple > 0,
           ErrorKind::kConfig,
           "Llama config {}: every size, the rotary base, eps and the vocabulary multiple ({}) must be positive",
           str(), vocab_multiple);
  const ops::RopeScaling& r = rope_scaling;
  HT_CHECK(!r.enabled() || (r.factor >= 1.f && r.low_freq_factor > 0.f && r.low_freq_factor < r.high_freq_factor &&
                            r.original_max_positions > 0),
           ErrorKind::kConfig,
           "Llama config {}: rope scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and a positive "
           "original context",
           str());
  HT_CHECK(n_embd % n_head == 0, ErrorKind::kConfig,
           "Llama config: n_head={} does not divide n_embd={}: choose n_head in {}", n_head, n_embd,
           divisors_list(n_embd));
  HT_CHECK((n_embd / n_head) % 2 == 0, ErrorKind::kConfig,
           "Llama config {}: the head size {} must be even for rotary embeddings", str(), n_embd / n_head);
  HT_CHECK(n_head % n_kv_head == 0, ErrorKind::kConfig,
           "Llama config: --kv-heads {} must divide n_head={}: choose it in {}", n_kv_head, n_head,
           divisors_list(n_head));
  HT_CHECK(experts >= 0 && shared_experts >= 0 && moe_every >= 1 && moe_capacity_factor >= 0 &&
               moe_bias_update_rate >= 0,
           ErrorKind::kConfig,
           "Llama config: --experts {}, --shared-experts {}, --moe-capacity {} and --moe-bias-update {} must be >= 0 "
           "and --moe-every {} >= 1",
           experts, shared_experts, moe_capacity_factor, moe_bias_update_rate, moe_every);
  HT_CHECK(experts == 0 || (top_k >= 1 && top_k <= experts), ErrorKind::kConfig,
           "Llama config: --top-k {} must lie in [1, --experts {}]", top_k, experts);
  HT_CHECK(experts == 0 || moe_every <= n_layer, ErrorKind::kConfig,
           "Llama config: --moe-every {} leaves none of the {} layers a mixture of experts; give at most {}",
           moe_every, n_layer, n_layer);
}

void LlamaConfig::validate_parallel(int tp, int pp) const {
  validate();
  HT_CHECK(tp > 0 && pp > 0, ErrorKind::kConfig, "--tp ({}) and --pp ({}) must be positive", tp, pp);
  HT_CHECK(n_kv_head % tp == 0, ErrorKind::kConfig,
           "Llama config {}: n_kv_head={} does not split over --tp {}: choose --tp in {} or more --kv-heads", str(),
           n_kv_head, tp, divisors_list(n_kv_head));
  HT_CHECK(ffn_hidden % tp == 0 && padded_vocab_size() % tp == 0, ErrorKind::kConfig,
           "Llama config {}: --ffn {} and the vocabulary {}{} must both split over --tp {}", str(), ffn_hidden,
           vocab_size, padded_vocab_size() != vocab_size ? fmt::format(" (padded to {})", padded_vocab_size()) : "",
           tp);
  HT_CHECK(n_layer >= pp, ErrorKind::kConfig,
           "Llama config {}: {} layers cannot fill {} pipeline stages (one block per stage at least): lower --pp to "
           "<= {}",
           str(), n_layer, pp, n_layer);
}

std::int64_t LlamaConfig::padded_vocab_size() const {
  const std::int64_t m = std::max<std::int64_t>(vocab_multiple, 1);
  return (vocab_size + m - 1) / m * m;
}

std::int64_t LlamaConfig::ffn_for_width(std::int64_t n_embd) {
  return (8 * n_embd / 3 + 255) / 256 * 256;
}

std::int64_t LlamaConfig::num_parameters() const {
  const std::int64_t c = n_embd, kv = c / n_head * n_kv_head;
  const std::int64_t attention = 2 * c + (c * c + 2 * c * kv + c * c) + (qkv_bias ? c + 2 * kv : 0),
                     mlp = 3 * c * ffn_hidden;
  const std::int64_t moe = c * experts + (experts + shared_experts) * mlp;
  std::int64_t total = (tie_embeddings ? 1 : 2) * padded_vocab_size() * c + c;
  for (int l = 0; l < n_layer; ++l) total += attention + (moe_layer(l) ? moe : mlp);
  return total;
}

std::int64_t LlamaConfig::active_parameters() const {
  const std::int64_t c = n_embd, mlp = 3 * c * ffn_hidden;
  std::int64_t idle = 0;  // the routed experts a token does not go through
  for (int l = 0; l < n_layer; ++l)
    if (moe_layer(l)) idle += std::int64_t(experts - top_k) * mlp;
  return num_parameters() - idle;
}

double LlamaConfig::flops_per_token(std::int64_t seq_len) const {
  // The embedding is a lookup; the head's padding rows are not useful work.
  // A token goes through top_k of each mixture's routed experts.
  // A tied embedding is counted once, as the head's matrix.
  const std::int64_t embedding = tie_embeddings ? 0 : padded_vocab_size() * n_embd;
  const double n = double(active_parameters() - embedding - (padded_vocab_size() - vocab_size) * n_embd);
  return 6.0 * n + 12.0 * double(n_layer) * double(seq_len) * double(n_embd);
}

namespace {
constexpr std::pair<LlamaFamily, std::string_view> kFamilyNames[] = {
    {LlamaFamily::kLlama, "llama"}, {LlamaFamily::kMistral, "mistral"}, {LlamaFamily::kQwen2, "qwen2"}};
}  // namespace

std::string_view family_name(LlamaFamily family) {
  for (const auto& [f, name] : kFamilyNames)
    if (f == family) return name;
  return "llama";
}

std::optional<LlamaFamily> family_named(std::string_view name) {
  for (const auto& [f, n] : kFamilyNames)
    if (n == name) return f;
  return std::nullopt;
}

std::string LlamaConfig::str() const {
  const std::string pad = padded_vocab_size() != vocab_size ? fmt::format(" Vp{}", padded_vocab_size()) : "";
  const std::string capacity = (moe_capacity_factor > 0 ? fmt::format(" cap{:g}", moe_capacity_factor) : "") +
                               (moe_bias_update_rate > 0 ? fmt::format(" bias{:g}", moe_bias_update_rate) : "");
  const std::string moe = experts > 0 ? fmt::format(" E{}k{} S{} every{} aux{:g} z{:g}{}", experts, top_k,
                                                    shared_experts, moe_every, moe_aux_loss_coeff, moe_z_loss_coeff,
                                                    capacity)
                                      : "";
  const std::string eps = norm_eps != 1e-5f ? fmt::format(" eps{:g}", norm_eps) : "";
  const ops::RopeScaling& r = rope_scaling;
  const std::string scaling = r.enabled() ? fmt::format(" llama3x{:g},{:g},{:g},{}", r.factor, r.low_freq_factor,
                                                        r.high_freq_factor, r.original_max_positions)
                                          : "";
  const std::string named = family != LlamaFamily::kLlama ? " " + std::string(family_name(family)) : "";
  return fmt::format("L{} H{} KV{} C{} F{} V{}{} T{} theta{:g}{}{}{}{}{}{}", n_layer, n_head, n_kv_head, n_embd,
                     ffn_hidden, vocab_size, pad, context, rope_theta, scaling, eps, tie_embeddings ? " tied" : "",
                     qkv_bias ? " qkvbias" : "", named, moe);
}

Llama::Llama(const LlamaConfig& config, const nn::Placement& placement)
    : CausalLM("llama", placement, config.vocab_size, config.context, config.n_embd, config.padded_vocab_size()),
      config_(config) {
  const nn::TensorParallel& tp = placement.tp;
  const Device device = placement.device;
  config.validate_parallel(tp.size(), stage().size);
  nn::Embedding* embed = nullptr;
  std::vector<nn::Module*> layers;
  nn::RMSNorm* norm = nullptr;
  nn::LMHead* head = nullptr;
  if (first_stage())
    embed = &add_built(
        std::make_unique<nn::Embedding>("embed_tokens", config.vocab_size, 0, config.n_embd, device, tp, "weight",
                                        "wpe", config.padded_vocab_size()));
  const auto [first, last] = parallel::stage_range(config.n_layer, stage().rank, stage().size, stage().boundaries);
  for (int i = first; i < last; ++i)
    layers.push_back(
        &add_built(std::make_unique<LlamaBlock>(fmt::format("layers.{}", i), config, config.moe_layer(i), device, tp,
                                                placement.cp, placement.ep)));
  if (last_stage()) {
    norm = &add_built(std::make_unique<nn::RMSNorm>("norm", config.n_embd, device, config.norm_eps));
    if (config.tie_embeddings && first_stage()) {
      // The head reuses the token embedding: two gradient contributions per backward.
      head = &add_module(std::make_unique<nn::LMHead>(embed->token_weight(), tp));
      embed->token_weight().set_uses(2);
    } else {
      // Tied on another stage than the embedding's: a copy of the same name.
      head = &add_built(std::make_unique<nn::LMHead>(config.tie_embeddings ? "embed_tokens" : "lm_head", "weight",
                                                     config.vocab_size, config.n_embd, device, tp,
                                                     config.padded_vocab_size()));
    }
  }
  set_stage(embed, std::move(layers), norm, head);
  for (nn::Parameter* p : parameters())
    p->set_init(p->name().ends_with(".bias")        ? nn::Init::zeros()
                : p->full_shape().size() == 1 ? nn::Init::ones()  // the norms' gains
                                              : nn::Init::normal(0.02f));
}

std::vector<nn::TiedWeight> Llama::tied_weights() const {
  if (!config_.tie_embeddings || stage().size == 1) return {};
  return {{.name = "embed_tokens.weight", .stages = {0, stage().size - 1}}};
}

double Llama::flops_per_token(const Shape& input_shape) const {
  return config_.flops_per_token(sequence_length(input_shape));
}

}  // namespace ht::models
