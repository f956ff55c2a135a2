// ht::models::ModelFlags: the bundled models' command-line flags, declared
// once for gpt_train, llama_train, ht-plan and the benches: --preset NAME
// (ht/models/presets.h), then any size over it.
//
// A size given on the command line replaces the preset's; a Llama given
// --embd without --ffn gets Llama's own rule for the MLP's hidden size
// (LlamaConfig::ffn_for_width), so the same flags plan and train the same
// model in every program.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "ht/models/presets.h"

namespace ht::models {

class ModelFlags {
 public:
  /// A program that trains one architecture, "gpt" or "llama": its model is
  /// `default_preset` unless --preset or a size says otherwise.
  ModelFlags(std::string arch, std::string default_preset);
  /// A program that takes either (ht-plan): --model gpt|llama as well, each
  /// architecture starting from its own default preset.
  static ModelFlags either(std::string gpt_default, std::string llama_default);

  /// --preset, the sizes (the Llama ones only where a Llama can be asked
  /// for) and, for either architecture, --model.
  void add_to(CLI::App& app);
  /// After parsing: the preset (else the default) with the sizes given put
  /// over it, validated. With --init-from DIR: the model of DIR's
  /// config.json (models/hf_format.h), which no preset or size may change
  /// but --vocab-multiple (padding is not part of the model). Throws kConfig for a preset of another
  /// architecture than the program's or --model's, or a Llama size given
  /// for a GPT.
  ModelConfig resolve() const;
  /// resolve()'s config of the one architecture a program trains.
  GPTConfig gpt() const { return std::get<GPTConfig>(resolve()); }
  LlamaConfig llama() const { return std::get<LlamaConfig>(resolve()); }
  /// --init-from: a Hugging Face model directory whose weights the run
  /// starts from (models::HFWeights), or "".
  const std::string& init_from() const { return init_from_; }

 private:
  ModelFlags() = default;
  static bool given(const CLI::Option* option) { return option && option->count() > 0; }

  std::string arch_;  // "gpt", "llama", or "" for either
  std::string gpt_default_, llama_default_;
  std::string preset_, model_ = "gpt", init_from_;
  int layers_ = 0, heads_ = 0, kv_heads_ = 0;
  std::int64_t embd_ = 0, ffn_ = 0, context_ = 0, vocab_ = 0, vocab_multiple_ = 0;
  float rope_theta_ = 0.f;
  int experts_ = 0, top_k_ = 0, shared_experts_ = 0, moe_every_ = 0;
  float moe_aux_ = 0.f, moe_z_ = 0.f, moe_capacity_ = 0.f, moe_bias_ = 0.f;
  CLI::Option *experts_opt_ = nullptr, *top_k_opt_ = nullptr, *shared_experts_opt_ = nullptr,
              *moe_every_opt_ = nullptr, *moe_aux_opt_ = nullptr, *moe_z_opt_ = nullptr, *moe_capacity_opt_ = nullptr,
              *moe_bias_opt_ = nullptr;
  CLI::Option* init_from_opt_ = nullptr;
  CLI::Option *preset_opt_ = nullptr, *model_opt_ = nullptr, *layers_opt_ = nullptr, *heads_opt_ = nullptr,
              *kv_heads_opt_ = nullptr, *embd_opt_ = nullptr, *ffn_opt_ = nullptr, *rope_theta_opt_ = nullptr,
              *context_opt_ = nullptr, *vocab_opt_ = nullptr, *vocab_multiple_opt_ = nullptr;
};

}  // namespace ht::models
