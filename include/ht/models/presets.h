// ht::models presets: the bundled models' named sizes, said once. The
// examples (gpt_train, llama_train --preset), ht-plan --preset, the benches
// and the docs all read this table, so a name means one model everywhere.
//
// A ModelConfig is either architecture's config; the free functions below
// answer for either, so a program that takes both (ht-plan) needs no switch
// of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ht/models/gpt.h"
#include "ht/models/llama.h"

namespace ht::models {

using ModelConfig = std::variant<GPTConfig, LlamaConfig>;

struct ModelPreset {
  std::string name;   // "gpt2-124m"
  ModelConfig config;
  std::string about;  // where the sizes come from
};

/// Every preset, in the order --help lists them.
const std::vector<ModelPreset>& model_presets();
/// The preset called `name`; throws kConfig naming every preset when none is.
const ModelPreset& find_preset(std::string_view name);
/// "gpt2-124m, gpt2-350m, ...": for messages and --help.
std::string preset_names();

/// "gpt" or "llama".
std::string_view architecture(const ModelConfig& config);
/// "GPT L12 H12 C768 V50257 Vp50304 T1024", as the model's describe().
std::string describe(const ModelConfig& config);
/// The config of a model as describe() wrote it ("GPT L6 H6 C384 V256 T256",
/// "Llama L2 H4 KV2 C32 F48 V100 T32 theta10000 eps1e-06 tied"): how a
/// checkpoint, which records its model's description, is exported. Throws
/// kInvalidArgument naming the text that does not parse; parse then
/// describe gives the text back.
ModelConfig parse_model_description(const std::string& description);
std::int64_t num_parameters(const ModelConfig& config);
double flops_per_token(const ModelConfig& config, std::int64_t seq_len);
nn::ModelSpec spec(const ModelConfig& config, std::int64_t seq_len);
std::int64_t vocab_size(const ModelConfig& config);
std::int64_t context(const ModelConfig& config);
/// validate_parallel of the architecture's config.
void validate_parallel(const ModelConfig& config, int tp, int pp);
/// The model of `config` for one rank of a layout.
std::unique_ptr<CausalLM> make_model(const ModelConfig& config, const nn::Placement& placement);

}  // namespace ht::models
