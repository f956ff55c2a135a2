// ht::models::ModelFlags: --preset and the sizes over it.
#include "ht/models/model_flags.h"

#include <fmt/format.h>

#include "ht/core/error.h"
#include "ht/models/hf_format.h"

namespace ht::models {

ModelFlags::ModelFlags(std::string arch, std::string default_preset) : arch_(std::move(arch)) {
  HT_CHECK(arch_ == "gpt" || arch_ == "llama", ErrorKind::kInvalidArgument, "ModelFlags: architecture '{}'", arch_);
  (arch_ == "gpt" ? gpt_default_ : llama_default_) = std::move(default_preset);
}

ModelFlags ModelFlags::either(std::string gpt_default, std::string llama_default) {
  ModelFlags f;
  f.gpt_default_ = std::move(gpt_default);
  f.llama_default_ = std::move(llama_default);
  return f;
}

void ModelFlags::add_to(CLI::App& app) {
  const std::string defaults = arch_.empty() ? fmt::format("{} for gpt, {} for llama", gpt_default_, llama_default_)
                                             : (arch_ == "gpt" ? gpt_default_ : llama_default_);
  preset_opt_ = app.add_option("--preset", preset_,
                               fmt::format("the model's sizes by name (default {}): {}; a size flag given too "
                                           "replaces the preset's",
                                           defaults, preset_names()));
  if (arch_.empty()) model_opt_ = app.add_option("--model", model_, "gpt or llama (without --preset)");
  init_from_opt_ = app.add_option("--init-from", init_from_,
                                   "a Hugging Face model directory (config.json, safetensors): the model and the "
                                   "weights to start from, read into any layout");
  layers_opt_ = app.add_option("--layers,--n-layer", layers_, "transformer blocks");
  heads_opt_ = app.add_option("--heads,--n-head", heads_, "attention (query) heads");
  embd_opt_ = app.add_option("--embd,--n-embd", embd_, "model width");
  context_opt_ = app.add_option("--context", context_, "maximum sequence length (positions)");
  vocab_opt_ = app.add_option("--vocab,--vocab-size", vocab_, "vocabulary size (256 for bytes)");
  vocab_multiple_opt_ = app.add_option(
      "--vocab-multiple", vocab_multiple_,
      "store the embedding and head with the vocabulary padded to a multiple of this (128 for GPT-2's 50257 -> "
      "50304; padding ids are never trained on nor sampled)");
  if (arch_ != "gpt") {
    kv_heads_opt_ = app.add_option("--kv-heads", kv_heads_,
                                   "Llama: key/value heads (grouped-query attention; divides --heads)");
    ffn_opt_ = app.add_option("--ffn,--ffn-hidden", ffn_,
                              "Llama: hidden size of the SwiGLU MLP (default with --embd: 8/3 x width rounded up "
                              "to a multiple of 256, Llama's rule)");
    rope_theta_opt_ = app.add_option("--rope-theta", rope_theta_, "Llama: base of the rotary position embeddings");
    experts_opt_ = app.add_option("--experts", experts_,
                                  "Llama: a mixture of this many experts (each of --ffn) in place of the MLP of every "
                                  "--moe-every-th block (nn::MoE)");
    top_k_opt_ = app.add_option("--top-k", top_k_, "Llama, with --experts: experts per token (default 2)");
    shared_experts_opt_ = app.add_option("--shared-experts", shared_experts_,
                                         "Llama, with --experts: experts every token goes through too (DeepSeek's)");
    moe_every_opt_ = app.add_option("--moe-every", moe_every_,
                                    "Llama, with --experts: every how many blocks one is a mixture (default 1: all)");
    moe_aux_opt_ = app.add_option("--moe-aux-loss", moe_aux_,
                                  "Llama, with --experts: the load-balancing loss's coefficient (default 0.01)");
    moe_z_opt_ = app.add_option("--moe-z-loss", moe_z_, "Llama, with --experts: the router z-loss's (default 0)");
    moe_capacity_opt_ = app.add_option("--moe-capacity", moe_capacity_,
                                       "Llama, with --experts: each expert takes at most this factor x its even share of "
                                       "a sequence's choices, the rest dropped (default 0: dropless)");
    moe_bias_opt_ = app.add_option("--moe-bias-update", moe_bias_,
                                   "Llama, with --experts: balance the load without a loss, DeepSeek-V3's way: a "
                                   "per-expert routing bias moved by this much a step towards balance (DeepSeek-V3: "
                                   "0.001; default 0: none)");
  }
  // The members' zeros are "not given", not defaults: --help must not show them.
  for (CLI::Option* o : {preset_opt_, layers_opt_, heads_opt_, embd_opt_, context_opt_, vocab_opt_, vocab_multiple_opt_,
                         kv_heads_opt_, ffn_opt_, rope_theta_opt_, experts_opt_, top_k_opt_, shared_experts_opt_,
                         moe_every_opt_, moe_aux_opt_, moe_z_opt_, moe_capacity_opt_, moe_bias_opt_})
    if (o) o->always_capture_default(false)->default_str("");
  if (model_opt_) model_opt_->capture_default_str();
}

ModelConfig ModelFlags::resolve() const {
  if (given(init_from_opt_)) {
    ModelConfig config = read_hf_config(init_from_);
    const std::string_view got = architecture(config);
    HT_CHECK(arch_.empty() || got == arch_, ErrorKind::kConfig,
             "--init-from {} holds a {} model; this program trains {} models (use {}_train)", init_from_, got, arch_,
             got);
    for (const CLI::Option* o : {preset_opt_, model_opt_, layers_opt_, heads_opt_, embd_opt_, context_opt_,
                                 vocab_opt_, kv_heads_opt_, ffn_opt_, rope_theta_opt_, experts_opt_, top_k_opt_,
                                 shared_experts_opt_, moe_every_opt_, moe_aux_opt_, moe_z_opt_, moe_capacity_opt_,
                                 moe_bias_opt_})
      HT_CHECK(!given(o), ErrorKind::kConfig,
               "{} would change the model that --init-from {} describes in its config.json: drop it", o->get_name(),
               init_from_);
    if (given(vocab_multiple_opt_))
      std::visit([&](auto& c) { c.vocab_multiple = vocab_multiple_; }, config);
    return config;
  }
  const std::string arch = !arch_.empty() ? arch_ : model_;
  HT_CHECK(arch == "gpt" || arch == "llama", ErrorKind::kConfig, "--model '{}' is not known: choose gpt or llama",
           arch);
  ModelConfig config;
  if (given(preset_opt_)) {
    const ModelPreset& p = find_preset(preset_);
    HT_CHECK(architecture(p.config) == arch || (arch_.empty() && !given(model_opt_)), ErrorKind::kConfig,
             "--preset {} is a {} model ({}); {}", p.name, architecture(p.config), describe(p.config),
             arch_.empty() ? fmt::format("--model says {}", arch)
                           : fmt::format("this program trains {} models (use {}_train)", arch_,
                                         architecture(p.config)));
    config = p.config;
  } else {
    config = find_preset(arch == "gpt" ? gpt_default_ : llama_default_).config;
  }
  std::visit(
      [&](auto& c) {
        if (given(layers_opt_)) c.n_layer = layers_;
        if (given(heads_opt_)) c.n_head = heads_;
        if (given(embd_opt_)) c.n_embd = embd_;
        if (given(context_opt_)) c.context = context_;
        if (given(vocab_opt_)) c.vocab_size = vocab_;
        if (given(vocab_multiple_opt_)) c.vocab_multiple = vocab_multiple_;
        if constexpr (std::is_same_v<std::decay_t<decltype(c)>, LlamaConfig>) {
          if (given(kv_heads_opt_)) c.n_kv_head = kv_heads_;
          if (given(ffn_opt_)) c.ffn_hidden = ffn_;
          else if (given(embd_opt_)) c.ffn_hidden = LlamaConfig::ffn_for_width(embd_);
          if (given(rope_theta_opt_)) c.rope_theta = rope_theta_;
          if (given(experts_opt_)) c.experts = experts_;
          if (given(top_k_opt_)) c.top_k = top_k_;
          if (given(shared_experts_opt_)) c.shared_experts = shared_experts_;
          if (given(moe_every_opt_)) c.moe_every = moe_every_;
          if (given(moe_aux_opt_)) c.moe_aux_loss_coeff = moe_aux_;
          if (given(moe_z_opt_)) c.moe_z_loss_coeff = moe_z_;
          if (given(moe_capacity_opt_)) c.moe_capacity_factor = moe_capacity_;
          if (given(moe_bias_opt_)) c.moe_bias_update_rate = moe_bias_;
          for (const CLI::Option* o : {top_k_opt_, shared_experts_opt_, moe_every_opt_, moe_aux_opt_, moe_z_opt_,
                                       moe_capacity_opt_, moe_bias_opt_})
            HT_CHECK(!given(o) || c.experts > 0, ErrorKind::kConfig, "{} shapes a mixture of experts: give --experts",
                     o->get_name());
        } else {
          for (const CLI::Option* o : {kv_heads_opt_, ffn_opt_, rope_theta_opt_, experts_opt_, top_k_opt_,
                                       shared_experts_opt_, moe_every_opt_, moe_aux_opt_, moe_z_opt_,
                                       moe_capacity_opt_, moe_bias_opt_})
            HT_CHECK(!given(o), ErrorKind::kConfig, "{} is a Llama size; a GPT has none (--model llama?)",
                     o->get_name());
        }
        c.validate();
      },
      config);
  return config;
}

}  // namespace ht::models
