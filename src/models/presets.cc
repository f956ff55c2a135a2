// The bundled models' presets and what a ModelConfig of either architecture answers.
#include "ht/models/presets.h"

#include <fmt/format.h>

#include <cctype>
#include <sstream>

#include "ht/core/error.h"

namespace ht::models {

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"gpt-small", GPTConfig{.vocab_size = 256, .context = 256, .n_layer = 6, .n_head = 6, .n_embd = 384},
       "gpt_train's default: bytes as tokens"},
      {"gpt2-124m",
       GPTConfig{.vocab_size = 50257, .context = 1024, .n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_multiple = 128},
       "GPT-2 small (OpenAI, 2019)"},
      {"gpt2-350m",
       GPTConfig{.vocab_size = 50257, .context = 1024, .n_layer = 24, .n_head = 16, .n_embd = 1024, .vocab_multiple = 128},
       "GPT-2 medium"},
      {"gpt2-774m",
       GPTConfig{.vocab_size = 50257, .context = 1024, .n_layer = 36, .n_head = 20, .n_embd = 1280, .vocab_multiple = 128},
       "GPT-2 large"},
      {"gpt2-1.5b",
       GPTConfig{.vocab_size = 50257, .context = 1024, .n_layer = 48, .n_head = 25, .n_embd = 1600, .vocab_multiple = 128},
       "GPT-2 XL"},
      {"llama-small",
       LlamaConfig{.vocab_size = 256, .context = 256, .n_layer = 6, .n_head = 6, .n_kv_head = 2, .n_embd = 384,
                   .ffn_hidden = 1024},
       "llama_train's default: bytes as tokens"},
      {"llama-124m",
       LlamaConfig{.vocab_size = 50257, .context = 1024, .n_layer = 12, .n_head = 12, .n_kv_head = 4, .n_embd = 768,
                   .ffn_hidden = 2048, .vocab_multiple = 128},
       "a Llama of GPT-2 small's width and vocabulary"},
      {"llama-1b",
       LlamaConfig{.vocab_size = 32000, .context = 2048, .n_layer = 22, .n_head = 32, .n_kv_head = 4, .n_embd = 2048,
                   .ffn_hidden = 5632, .vocab_multiple = 128},
       "TinyLlama 1.1B"},
      {"llama2-7b",
       LlamaConfig{.vocab_size = 32000, .context = 4096, .n_layer = 32, .n_head = 32, .n_kv_head = 32, .n_embd = 4096,
                   .ffn_hidden = 11008, .vocab_multiple = 128},
       "Llama 2 7B (Meta, 2023)"},
      {"llama2-13b",
       LlamaConfig{.vocab_size = 32000, .context = 4096, .n_layer = 40, .n_head = 40, .n_kv_head = 40, .n_embd = 5120,
                   .ffn_hidden = 13824, .vocab_multiple = 128},
       "Llama 2 13B"},
      {"llama2-70b",
       LlamaConfig{.vocab_size = 32000, .context = 4096, .n_layer = 80, .n_head = 64, .n_kv_head = 8, .n_embd = 8192,
                   .ffn_hidden = 28672, .vocab_multiple = 128},
       "Llama 2 70B"},
      {"llama3-8b",
       LlamaConfig{.vocab_size = 128256, .context = 8192, .n_layer = 32, .n_head = 32, .n_kv_head = 8, .n_embd = 4096,
                   .ffn_hidden = 14336, .rope_theta = 500000.f, .vocab_multiple = 128},
       "Llama 3 8B (Meta, 2024)"},
      {"mixtral-8x7b",
       LlamaConfig{.vocab_size = 32000, .context = 4096, .n_layer = 32, .n_head = 32, .n_kv_head = 8, .n_embd = 4096,
                   .ffn_hidden = 14336, .rope_theta = 1000000.f, .vocab_multiple = 128, .experts = 8, .top_k = 2,
                   .shared_experts = 0, .moe_every = 1},
       "Mixtral 8x7B (Mistral AI, 2023): config.json of mistralai/Mixtral-8x7B-v0.1 (8 experts of 14336, top-2, "
       "every layer), trained at 32768 positions; 4096 here"},
      {"deepseek-moe-16b",
       LlamaConfig{.vocab_size = 102400, .context = 4096, .n_layer = 28, .n_head = 16, .n_kv_head = 16, .n_embd = 2048,
                   .ffn_hidden = 1408, .vocab_multiple = 128, .experts = 64, .top_k = 6, .shared_experts = 2,
                   .moe_every = 1},
       "DeepSeekMoE 16B (DeepSeek, 2024): config.json of deepseek-ai/deepseek-moe-16b-base (64 experts of 1408, "
       "top-6, 2 shared); its first layer, a dense MLP of 10944, is modelled as a mixture like the others"},
  };
  return presets;
}

std::string preset_names() {
  std::string names;
  for (const ModelPreset& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

const ModelPreset& find_preset(std::string_view name) {
  for (const ModelPreset& p : model_presets())
    if (p.name == name) return p;
  throw Error(ErrorKind::kConfig, fmt::format("preset '{}' is not known: choose {}", name, preset_names()));
}

std::string_view architecture(const ModelConfig& config) {
  return std::holds_alternative<GPTConfig>(config) ? "gpt" : "llama";
}

std::string describe(const ModelConfig& config) {
  return std::visit(
      [](const auto& c) {
        return std::string(std::is_same_v<std::decay_t<decltype(c)>, GPTConfig> ? "GPT " : "Llama ") + c.str();
      },
      config);
}

std::int64_t num_parameters(const ModelConfig& config) {
  return std::visit([](const auto& c) { return c.num_parameters(); }, config);
}

double flops_per_token(const ModelConfig& config, std::int64_t seq_len) {
  return std::visit([&](const auto& c) { return c.flops_per_token(seq_len); }, config);
}

nn::ModelSpec spec(const ModelConfig& config, std::int64_t seq_len) {
  return std::visit([&](const auto& c) { return c.spec(seq_len); }, config);
}

std::int64_t vocab_size(const ModelConfig& config) {
  return std::visit([](const auto& c) { return c.vocab_size; }, config);
}

std::int64_t context(const ModelConfig& config) {
  return std::visit([](const auto& c) { return c.context; }, config);
}

void validate_parallel(const ModelConfig& config, int tp, int pp) {
  std::visit([&](const auto& c) { c.validate_parallel(tp, pp); }, config);
}

std::unique_ptr<CausalLM> make_model(const ModelConfig& config, const nn::Placement& placement) {
  if (const auto* gpt = std::get_if<GPTConfig>(&config)) return std::make_unique<GPT>(*gpt, placement);
  return std::make_unique<Llama>(std::get<LlamaConfig>(config), placement);
}

ModelConfig parse_model_description(const std::string& description) {
  std::istringstream in(description);
  std::string arch, word;
  in >> arch;
  auto bad = [&](const std::string& what) {
    return Error(ErrorKind::kInvalidArgument,
                 fmt::format("model description '{}': {}; expected \"GPT L.. H.. C.. V.. T..\" or \"Llama L.. H.. "
                             "KV.. C.. F.. V.. T.. theta..\" as the model's describe() writes it",
                             description, what));
  };
  std::vector<std::string> words;
  while (in >> word) words.push_back(word);
  // The number after `prefix` in `w`, when `w` starts with it and the rest parses whole.
  auto number = [](const std::string& w, std::string_view prefix, double& v) {
    if (!w.starts_with(prefix) || w.size() == prefix.size()) return false;
    const std::string rest = w.substr(prefix.size());
    if (!(std::isdigit(static_cast<unsigned char>(rest[0])) || rest[0] == '.')) return false;
    std::size_t used = 0;
    try {
      v = std::stod(rest, &used);
    } catch (const std::exception&) {
      return false;
    }
    return used == rest.size();
  };
  std::int64_t padded = 0;
  ModelConfig config;
  if (arch == "GPT") {
    GPTConfig c;
    for (const std::string& w : words) {
      double v = 0;
      if (number(w, "Vp", v)) padded = std::int64_t(v);
      else if (number(w, "L", v)) c.n_layer = int(v);
      else if (number(w, "H", v)) c.n_head = int(v);
      else if (number(w, "C", v)) c.n_embd = std::int64_t(v);
      else if (number(w, "V", v)) c.vocab_size = std::int64_t(v);
      else if (number(w, "T", v)) c.context = std::int64_t(v);
      else throw bad("'" + w + "' is not part of a GPT's description");
    }
    if (padded > 0) c.vocab_multiple = padded;
    config = c;
  } else if (arch == "Llama") {
    LlamaConfig c;
    for (std::size_t i = 0; i < words.size(); ++i) {
      const std::string& w = words[i];
      double v = 0;
      if (w == "tied") c.tie_embeddings = true;
      else if (w == "qkvbias") c.qkv_bias = true;
      else if (const auto f = family_named(w); f && *f != LlamaFamily::kLlama) c.family = *f;
      else if (number(w, "Vp", v)) padded = std::int64_t(v);
      else if (number(w, "KV", v)) c.n_kv_head = int(v);
      else if (number(w, "L", v)) c.n_layer = int(v);
      else if (number(w, "H", v)) c.n_head = int(v);
      else if (number(w, "C", v)) c.n_embd = std::int64_t(v);
      else if (number(w, "F", v)) c.ffn_hidden = std::int64_t(v);
      else if (number(w, "V", v)) c.vocab_size = std::int64_t(v);
      else if (number(w, "T", v)) c.context = std::int64_t(v);
      else if (number(w, "theta", v)) c.rope_theta = float(v);
      else if (number(w, "eps", v)) c.norm_eps = float(v);
      else if (w.starts_with("llama3x")) {
        std::vector<double> f;
        std::string rest = w.substr(7);
        for (std::size_t at = 0; at <= rest.size();) {
          const std::size_t comma = std::min(rest.find(',', at), rest.size());
          double x = 0;
          if (!number("x" + rest.substr(at, comma - at), "x", x)) throw bad("'" + w + "' is not llama3x<f>,<lo>,<hi>,<ctx>");
          f.push_back(x);
          at = comma + 1;
        }
        if (f.size() != 4) throw bad("'" + w + "' is not llama3x<f>,<lo>,<hi>,<ctx>");
        c.rope_scaling = {.factor = float(f[0]),
                          .low_freq_factor = float(f[1]),
                          .high_freq_factor = float(f[2]),
                          .original_max_positions = std::int64_t(f[3])};
      }
      else if (w.starts_with("E") && w.find('k') != std::string::npos) {
        const std::size_t k = w.find('k');
        double e = 0, t = 0;
        if (!number(w.substr(0, k), "E", e) || !number(w.substr(k), "k", t)) throw bad("'" + w + "' is not E<n>k<n>");
        c.experts = int(e);
        c.top_k = int(t);
      } else if (number(w, "S", v)) c.shared_experts = int(v);
      else if (number(w, "every", v)) c.moe_every = int(v);
      else if (number(w, "aux", v)) c.moe_aux_loss_coeff = float(v);
      else if (number(w, "z", v)) c.moe_z_loss_coeff = float(v);
      else if (number(w, "cap", v)) c.moe_capacity_factor = float(v);
      else if (number(w, "bias", v)) c.moe_bias_update_rate = float(v);
      else throw bad("'" + w + "' is not part of a Llama's description");
    }
    if (padded > 0) c.vocab_multiple = padded;
    config = c;
  } else {
    throw bad("it names no architecture this library builds (GPT, Llama)");
  }
  try {
    std::visit([](const auto& c) { c.validate(); }, config);
  } catch (const Error& e) {
    throw bad(e.what());
  }
  const std::string again = describe(config);
  if (again != description) throw bad(fmt::format("it reads back as '{}'", again));
  return config;
}

}  // namespace ht::models
