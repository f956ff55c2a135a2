// Hugging Face model directories in and out: a GPT-2 (GPT2LMHeadModel), a
// Llama (LlamaForCausalLM), a Mistral (MistralForCausalLM) or a Qwen2
// (Qwen2ForCausalLM) as `transformers` writes it — config.json and
// safetensors weights (one model.safetensors, or shards with
// model.safetensors.index.json) — read into the bundled models on any
// layout, and written back from their full parameters.
//
// The two architectures are the bundled models, so the mapping is names and
// two layout changes:
//   GPT-2  transformer.wte.weight          <-> wte            (the head is tied to it)
//          transformer.wpe.weight          <-> wpe
//          transformer.h.N.ln_1.weight     <-> h.N.ln_1.weight  (ln_2, ln_f, biases alike)
//          transformer.h.N.attn.c_attn.weight [C, 3C] <-> h.N.attn.c_attn.weight [3C, C]
//          (and c_proj, mlp.c_fc, mlp.c_proj): GPT-2's Conv1D stores its weight
//          as [in, out], this library's Linear as [out, in]: transposed.
//          The "transformer." prefix is optional on reading (the Hub's gpt2
//          has none); the attention's mask buffers (attn.bias, attn.masked_bias)
//          are skipped; an lm_head.weight is taken only when it equals wte.
//   Llama  model.embed_tokens.weight       <-> embed_tokens.weight
//          model.layers.N.<x>              <-> layers.N.<x>   (norms, q/k/v/o_proj)
//          model.layers.N.mlp.gate_proj + up_proj  <-> layers.N.mlp.gate_up.weight,
//          [gate | up] stacked along the output rows; mlp.down_proj <-> mlp.down.weight
//          model.norm.weight               <-> norm.weight
//          lm_head.weight                  <-> lm_head.weight (absent when tied)
//   Mistral and Qwen2 are read and written as the Llama they compute
//          (LlamaConfig::family keeps the name for the export), when they
//          have no sliding window or one no shorter than the context;
//          Qwen2's q/k/v_proj.bias <-> layers.N.self_attn.q/k/v_proj.bias
//          (LlamaConfig::qkv_bias).
//          The rotary layout needs no change: Hugging Face's q_proj and
//          k_proj rows are already in the rotate-half order (its conversion
//          script permuted Meta's interleaved pairs), which is ops/rope.h's.
//
// What cannot be carried exactly is refused by name (kConfig), never
// approximated: another model_type, GPT-2 with another activation than
// gelu_new, n_inner other than 4 n_embd, layer_norm_epsilon other than 1e-5
// or scaled attention options; Llama with a rope_scaling other than Llama
// 3.1's ("llama3", which is carried: ops::RopeScaling), attention or MLP
// biases, another hidden_act than
// silu, a head_dim other than hidden_size / num_attention_heads; Mistral
// or Qwen2 with a sliding window shorter than the context; q/k/v biases
// outside a Qwen2 on export. A tensor
// the model does not have, a missing one, or one of the wrong shape is an
// IoError naming the tensor and the file.
//
// Values: each parameter is read as it is stored (F32, F16 or BF16; widened
// to f32 exactly) and only when the parameter is built: a rank reads the
// tensors of its own stage, one at a time, and keeps its tensor-parallel
// part (ZeRO shards are cut from that by the data-parallel layer), so no
// rank holds the whole model. Where the part is a range of the file's rows
// (a matrix split by rows, such as the embedding, q/k/v_proj and gate/up;
// GPT-2's row-parallel c_proj, whose Conv1D rows are this library's
// columns) only those rows are read from the mapping; a tensor split by
// the file's columns is read whole and cut. A padded vocabulary's extra
// rows are zero.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ht/ckpt/safetensors.h"
#include "ht/models/presets.h"
#include "ht/nn/model.h"

namespace ht::models {

namespace detail {
struct HFEntry;  // how one parameter is made from Hugging Face's tensors (hf_format.cc)
}

/// The model a Hugging Face directory's config.json describes. `dir` is the
/// directory (or its config.json). Throws IoError for a missing or
/// unreadable file, kConfig for a model this library cannot carry exactly.
/// The config's vocab_multiple is 1 (no padding); set it afterwards to pad.
ModelConfig read_hf_config(const std::string& dir);

/// config.json's text for `config` (the real vocabulary; padding is not
/// part of the model), weights in `torch_dtype` ("float32", "bfloat16",
/// "float16"). Throws kConfig for a mixture of experts (no Hugging Face
/// architecture here carries this library's).
std::string hf_config_json(const ModelConfig& config, const std::string& torch_dtype = "float32");

/// The weights of a Hugging Face directory, for one model config.
class HFWeights {
 public:
  /// Opens the safetensors of `dir` (ckpt::SafetensorsCheckpoint) and checks
  /// that its tensors are exactly those `config` needs, of the right shapes
  /// (IoError naming the first that is missing, extra or misshapen).
  static HFWeights open(const std::string& dir, const ModelConfig& config);

  /// The parameter's values as its rank holds them (this tensor-parallel
  /// part of the full tensor, f32 on the host), as nn::Parameter::
  /// initial_value gives them: what train::EngineOptions::initial_values
  /// takes. Throws kInvalidArgument for a parameter the format has no name for.
  Tensor initial_value(const nn::Parameter& p) const;
  /// Copies every parameter that holds storage (a model of one process, or
  /// one built without deferred storage) from the file.
  void load_into(nn::Model& model) const;

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }

 private:
  std::string dir_;
  ModelConfig config_;
  std::shared_ptr<const ckpt::SafetensorsCheckpoint> file_;
  std::string prefix_;  // GPT-2's "transformer." when the file uses it
  std::shared_ptr<const std::map<std::string, detail::HFEntry>> entries_;  // by this library's name
};

/// A model's full parameters as a writer takes them: each one's shape
/// (this library's names and layouts, padded vocabulary rows included, as
/// train::Engine::full_parameters or a checkpoint gives them), and its value
/// (f32, any device), asked for only when the writer reaches it.
struct FullParameters {
  std::map<std::string, Shape> shapes;
  std::function<Tensor(const std::string& name)> value;
};

/// The Hugging Face tensors of `full`, in the order transformers writes
/// them, converted to `dtype` (f32, f16, bf16), as sources that ask for each
/// parameter once, when the writer reaches it, and hold at most one at a
/// time (Llama's gate/up stack is asked for once for its two tensors). Every
/// shape is checked here, before anything is asked for: throws
/// kInvalidArgument naming a parameter that is missing, extra or of another shape.
ckpt::TensorSources to_hf_sources(const ModelConfig& config, const FullParameters& full, DType dtype = DType::kF32);
/// The same, from tensors in memory, converted at once.
ckpt::NamedTensors to_hf_tensors(const ModelConfig& config, const std::map<std::string, Tensor>& full,
                                 DType dtype = DType::kF32);

/// Writes a Hugging Face directory: config.json and the weights
/// (ckpt::write_safetensors_sharded, shards of at most `max_shard_bytes`),
/// each file atomic, config.json last. `dir` is created if missing. From
/// FullParameters, one parameter is held at a time.
void write_hf_model(const std::string& dir, const ModelConfig& config, const FullParameters& full,
                    DType dtype = DType::kF32, std::int64_t max_shard_bytes = 5'000'000'000);
void write_hf_model(const std::string& dir, const ModelConfig& config, const std::map<std::string, Tensor>& full,
                    DType dtype = DType::kF32, std::int64_t max_shard_bytes = 5'000'000'000);

}  // namespace ht::models
