// ht::models::Llama: the Llama architecture — RMSNorm before attention and
// MLP, rotary position embeddings, grouped-query attention (n_kv_head key/
// value heads shared by the query heads), a SwiGLU MLP, no biases, an output
// head of its own (untied) — with configurable size.
//
// Built for one rank of a tp x pp layout (an nn::Placement) like GPT: with a
// tensor-parallel group, query and key/value heads, the MLP's hidden units
// and the vocabulary split over it (so tp must divide n_kv_head); with a
// pipeline stage the model holds its contiguous blocks (split as GPT's: by
// parallel::stage_range, at the placement's stage boundaries or else by
// count), the embedding on the first stage and the final norm and head on
// the last. Parameter names
// follow Hugging Face's LlamaForCausalLM ("embed_tokens.weight",
// "layers.3.self_attn.q_proj.weight", "layers.3.input_layernorm.weight",
// "norm.weight", "lm_head.weight"), except the MLP, whose gate and up
// projections are packed in one matrix ("layers.3.mlp.gate_up.weight",
// [gate | up] along the output dimension; "layers.3.mlp.down.weight").
//
// Initialisation as Hugging Face's: N(0, 0.02) for every matrix and the
// embedding, ones for the norms.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ht/models/causal_lm.h"
#include "ht/nn/model_spec.h"
#include "ht/ops/rope.h"

namespace ht::models {

/// The Hugging Face architectures that compute a Llama (LlamaConfig::family).
enum class LlamaFamily { kLlama, kMistral, kQwen2 };
/// Its name, Hugging Face's model_type: "llama", "mistral", "qwen2".
std::string_view family_name(LlamaFamily family);
/// The family of that name, or none.
std::optional<LlamaFamily> family_named(std::string_view name);

struct LlamaConfig {
  std::int64_t vocab_size = 256;
  std::int64_t context = 256;  // maximum sequence length (rotary positions)
  int n_layer = 6;
  int n_head = 6;
  int n_kv_head = 2;
  std::int64_t n_embd = 384;
  std::int64_t ffn_hidden = 1024;  // the SwiGLU MLP's hidden size
  float rope_theta = 10000.f;
  /// Llama 3.1's frequency scaling of the rotary embeddings (ops::
  /// RopeScaling; Hugging Face's rope_scaling of rope_type "llama3"). Not
  /// enabled (factor 0): none.
  ops::RopeScaling rope_scaling;
  float norm_eps = 1e-5f;
  /// The output head reuses the token embedding (Hugging Face's
  /// tie_word_embeddings, as Llama 3.2 1B and 3B do): no lm_head.weight of
  /// its own; under pipeline parallelism the last stage holds a copy
  /// (tied_weights()), as GPT's.
  bool tie_embeddings = false;
  /// Biases on the q, k and v projections (none on the output's), as Qwen2.
  bool qkv_bias = false;
  /// The Hugging Face architecture the model is written back as: a Llama,
  /// a Mistral (MistralForCausalLM without a sliding window: a Llama's
  /// computation) or a Qwen2 (Qwen2ForCausalLM: a Llama's with qkv_bias).
  /// Read from config.json's model_type; changes nothing here.
  LlamaFamily family = LlamaFamily::kLlama;
  /// The embedding and head hold vocab_size rounded up to a multiple of
  /// this many rows; the extra ids are padding (see CausalLM). 1: none.
  std::int64_t vocab_multiple = 1;
  /// Mixture of experts (nn::MoE) in place of the SwiGLU MLP of every
  /// moe_every-th block (the last of each moe_every): `experts` routed
  /// experts of ffn_hidden each, top_k of them per token, softmax scores
  /// renormalised (Mixtral's), `shared_experts` beside them (DeepSeek's),
  /// the load-balancing and z-losses by coefficient. 0 experts: dense.
  int experts = 0;
  int top_k = 2;
  int shared_experts = 0;
  int moe_every = 1;
  float moe_aux_loss_coeff = 0.01f;
  float moe_z_loss_coeff = 0.f;
  float moe_capacity_factor = 0.f;  // 0: dropless (nn::MoEOptions::capacity_factor)
  float moe_bias_update_rate = 0.f;  // DeepSeek-V3's bias balancing (nn::MoEOptions::bias_update_rate); 0: none

  /// Throws kConfig naming the bad value and what would be valid.
  void validate() const;
  /// Also checks the split over `tp` tensor-parallel ranks (n_kv_head,
  /// ffn_hidden and padded_vocab_size() divisible) and `pp` stages (a block each).
  void validate_parallel(int tp, int pp) const;
  /// vocab_size rounded up to a multiple of vocab_multiple.
  std::int64_t padded_vocab_size() const;
  /// Llama's rule for the SwiGLU MLP's hidden size of a width: 8/3 of it
  /// rounded up to a multiple of 256 (384 -> 1024, 4096 -> 11008).
  static std::int64_t ffn_for_width(std::int64_t n_embd);
  /// As stored: the padded vocabulary's rows included.
  std::int64_t num_parameters() const;
  /// What one token goes through: num_parameters() less the routed experts
  /// it is not sent to (all of them when dense).
  std::int64_t active_parameters() const;
  /// Matmul FLOPs of one forward+backward per token: 6 N (N without the
  /// embedding, a lookup, and without the head's padding rows) plus
  /// attention's 12 L T C.
  double flops_per_token(std::int64_t seq_len) const;
  /// The model's layers for planning (nn::ModelSpec) at sequence length
  /// `seq_len`, counted from what this library's layers keep and compute
  /// (src/models/model_specs.cc).
  nn::ModelSpec spec(std::int64_t seq_len) const;
  /// Whether block `layer` is a mixture of experts.
  bool moe_layer(int layer) const { return experts > 0 && (layer + 1) % moe_every == 0; }
  /// "L6 H6 KV2 C384 F1024 V256 T256 theta10000", with " Vp<rows>" after
  /// V when the vocabulary is padded, " llama3x8,1,4,8192" with rope
  /// scaling (factor, low and high frequency factors, original context),
  /// " eps1e-06" when norm_eps is not
  /// 1e-5, " tied" with tie_embeddings and " E8k2 S1 every2 aux0.01 z0"
  /// with experts (so a checkpoint of another model does not resume).
  std::string str() const;
  friend bool operator==(const LlamaConfig&, const LlamaConfig&) = default;
};

class Llama : public CausalLM {
 public:
  /// Throws kConfig when the config does not split over the placement's tp
  /// and stages, or the stage boundaries do not fit n_layer. With
  /// placement.defer_storage each module's parameters are released as soon
  /// as it is built (ZeRO-3 fills them).
  explicit Llama(const LlamaConfig& config, const nn::Placement& placement = {});

  const LlamaConfig& config() const { return config_; }
  /// "Llama L6 H6 KV2 C384 F1024 V256 T256 theta10000".
  std::string describe() const override { return "Llama " + config_.str(); }
  int num_layers() const override { return config_.n_layer; }
  double flops_per_token(const Shape& input_shape) const override;
  /// Not with the mixtures' load-balancing loss (one product over a
  /// micro-batch's tokens, which a cp rank holds a part of; the z-loss, a
  /// mean over tokens, splits exactly) nor with a capacity (drops are per
  /// whole sequence).
  /// embed_tokens.weight on the first and last stages, when tied and they differ.
  std::vector<nn::TiedWeight> tied_weights() const override;
  bool supports_context_parallel() const override {
    return config_.experts == 0 || (config_.moe_aux_loss_coeff == 0.f && config_.moe_capacity_factor == 0.f);
  }

 private:
  LlamaConfig config_;
};

}  // namespace ht::models
