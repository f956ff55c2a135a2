// Hugging Face GPT-2 and Llama directories: config.json, the name and layout
// mapping of every tensor, reading into a rank's parameters and writing full
// parameters back (ht/models/hf_format.h).
#include "ht/models/hf_format.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/files.h"
#include "ht/nn/tensor_parallel.h"
#include "ht/ops/cast.h"
#include "ht/ops/movement.h"

namespace ht::models {

// How this library's tensor is made from Hugging Face's.
enum class Change {
  kCopy,       // the same tensor
  kTranspose,  // GPT-2's Conv1D: [in, out] there, [out, in] here
  kStackRows,  // several tensors stacked along the rows (Llama's gate_proj and up_proj)
};

struct detail::HFEntry {
  std::string ours;             // this library's parameter name
  Shape shape;                  // its full shape, the vocabulary's real rows only
  std::vector<std::string> hf;  // Hugging Face's tensors, without GPT-2's optional "transformer."
  Change change = Change::kCopy;
  bool vocab_rows = false;      // rows are the vocabulary (padded here, not there)

  // Hugging Face's shape of each of `hf`.
  Shape hf_shape() const {
    if (change == Change::kTranspose) return {shape.at(1), shape.at(0)};
    if (change == Change::kStackRows) return {shape.at(0) / std::int64_t(hf.size()), shape.at(1)};
    return shape;
  }
};

namespace {

using Entry = detail::HFEntry;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

[[noreturn]] void fail_io(const std::string& message) { throw IoError(ErrorKind::kIo, message); }

// Every parameter of the model of `config`, in the order transformers
// writes the tensors.
std::vector<Entry> entries_of(const GPTConfig& c) {
  const std::int64_t C = c.n_embd;
  std::vector<Entry> e;
  e.push_back({"wte", {c.vocab_size, C}, {"wte.weight"}, Change::kCopy, true});
  e.push_back({"wpe", {c.context, C}, {"wpe.weight"}});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    auto vec = [&](const std::string& n, std::int64_t size) { e.push_back({h + n, {size}, {h + n}}); };
    auto conv = [&](const std::string& n, std::int64_t out, std::int64_t in) {
      e.push_back({h + n + ".weight", {out, in}, {h + n + ".weight"}, Change::kTranspose});
      vec(n + ".bias", out);
    };
    vec("ln_1.weight", C);
    vec("ln_1.bias", C);
    conv("attn.c_attn", 3 * C, C);
    conv("attn.c_proj", C, C);
    vec("ln_2.weight", C);
    vec("ln_2.bias", C);
    conv("mlp.c_fc", 4 * C, C);
    conv("mlp.c_proj", C, 4 * C);
  }
  e.push_back({"ln_f.weight", {C}, {"ln_f.weight"}});
  e.push_back({"ln_f.bias", {C}, {"ln_f.bias"}});
  return e;
}

std::vector<Entry> entries_of(const LlamaConfig& c) {
  HT_CHECK(c.experts == 0, ErrorKind::kConfig,
           "Llama {} is a mixture of experts: no Hugging Face architecture here carries this library's (Mixtral's "
           "names and router are not mapped); export the weights with ht-ckpt export --format h5",
           c.str());
  const bool qwen2 = c.family == LlamaFamily::kQwen2;
  HT_CHECK(c.qkv_bias == qwen2, ErrorKind::kConfig,
           "Llama {}: {}; Hugging Face's Qwen2 has biases on q, k and v and its Llama none or on all four "
           "projections, so no architecture there computes this model: export it with ht-ckpt export --format h5",
           c.str(), qwen2 ? "a Qwen2 without q, k and v biases" : "q, k and v biases outside a Qwen2");
  const std::int64_t C = c.n_embd, kv = C / c.n_head * c.n_kv_head, F = c.ffn_hidden;
  std::vector<Entry> e;
  e.push_back({"embed_tokens.weight", {c.vocab_size, C}, {"model.embed_tokens.weight"}, Change::kCopy, true});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string ours = fmt::format("layers.{}.", l), hf = "model." + ours;
    auto copy = [&](const std::string& n, Shape shape) { e.push_back({ours + n, std::move(shape), {hf + n}}); };
    copy("input_layernorm.weight", {C});
    copy("self_attn.q_proj.weight", {C, C});
    if (c.qkv_bias) copy("self_attn.q_proj.bias", {C});
    copy("self_attn.k_proj.weight", {kv, C});
    if (c.qkv_bias) copy("self_attn.k_proj.bias", {kv});
    copy("self_attn.v_proj.weight", {kv, C});
    if (c.qkv_bias) copy("self_attn.v_proj.bias", {kv});
    copy("self_attn.o_proj.weight", {C, C});
    copy("post_attention_layernorm.weight", {C});
    e.push_back({ours + "mlp.gate_up.weight",
                 {2 * F, C},
                 {hf + "mlp.gate_proj.weight", hf + "mlp.up_proj.weight"},
                 Change::kStackRows});
    e.push_back({ours + "mlp.down.weight", {C, F}, {hf + "mlp.down_proj.weight"}});
  }
  e.push_back({"norm.weight", {C}, {"model.norm.weight"}});
  if (!c.tie_embeddings) e.push_back({"lm_head.weight", {c.vocab_size, C}, {"lm_head.weight"}, Change::kCopy, true});
  return e;
}

std::vector<Entry> entries_of(const ModelConfig& config) {
  return std::visit([](const auto& c) { return entries_of(c); }, config);
}

// Tensors a Hugging Face file may hold that are not parameters: GPT-2's
// causal-mask buffers and old Llamas' rotary frequencies.
bool skipped_buffer(const std::string& name) {
  auto ends = [&](std::string_view s) { return name.size() >= s.size() && name.ends_with(s); };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends(".rotary_emb.inv_freq");
}

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::kF32);
  ops::cast(t, out);
  return out;
}

Tensor as_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  ops::cast(t, out);
  return out;
}

Tensor transposed(const Tensor& t) {
  Tensor out = Tensor::empty({t.size(1), t.size(0)}, t.dtype());
  ops::transpose(t, 0, 1, out);
  return out;
}

Json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail_io(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  std::stringstream s;
  s << in.rdbuf();
  try {
    return Json::parse(s.str());
  } catch (const Json::exception& e) {
    fail_io(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  }
}

// The config's value of `key`, or `fallback` when absent or null.
template <typename T>
T get_or(const Json& j, const std::string& key, T fallback, const std::string& path) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (!it->is_number_integer()) throw std::invalid_argument("not an integer");
    }
    return it->template get<T>();
  } catch (const std::exception& e) {
    fail_io(fmt::format("'{}': \"{}\" is {}, which is not a valid value ({})", path, key, it->dump(), e.what()));
  }
}

template <typename T>
T get_required(const Json& j, const std::string& key, const std::string& path) {
  HT_CHECK(j.contains(key) && !j.at(key).is_null(), ErrorKind::kIo, "'{}' has no \"{}\": not a {} config", path,
           key, j.value("model_type", std::string("model")));
  return get_or<T>(j, key, T{}, path);
}

// Refuses a config value this library does not compute exactly.
template <typename T>
void require(const Json& j, const std::string& key, T expected, T fallback, const std::string& path,
             const std::string& why) {
  const T got = get_or<T>(j, key, fallback, path);
  HT_CHECK(got == expected, ErrorKind::kConfig, "'{}': \"{}\" is {}; this library carries only {} ({})", path, key,
           Json(got).dump(), Json(expected).dump(), why);
}

GPTConfig gpt_config(const Json& j, const std::string& path) {
  GPTConfig c;
  c.vocab_size = get_required<std::int64_t>(j, "vocab_size", path);
  c.context = get_or<std::int64_t>(j, "n_positions", get_or<std::int64_t>(j, "n_ctx", 1024, path), path);
  c.n_embd = get_required<std::int64_t>(j, "n_embd", path);
  c.n_layer = get_required<int>(j, "n_layer", path);
  c.n_head = get_required<int>(j, "n_head", path);
  const std::int64_t inner = get_or<std::int64_t>(j, "n_inner", 4 * c.n_embd, path);
  HT_CHECK(inner == 4 * c.n_embd, ErrorKind::kConfig,
           "'{}': \"n_inner\" is {}; this library's GPT-2 has an MLP of 4 n_embd = {}", path, inner, 4 * c.n_embd);
  const std::string act = get_or<std::string>(j, "activation_function", "gelu_new", path);
  HT_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", ErrorKind::kConfig,
           "'{}': \"activation_function\" is \"{}\"; this library's GPT-2 computes GELU's tanh approximation only "
           "(gelu_new, gelu_pytorch_tanh)",
           path, act);
  const double eps = get_or<double>(j, "layer_norm_epsilon", 1e-5, path);
  HT_CHECK(float(eps) == 1e-5f, ErrorKind::kConfig,
           "'{}': \"layer_norm_epsilon\" is {}; this library's GPT-2 LayerNorm uses 1e-5", path, eps);
  require<bool>(j, "scale_attn_weights", true, true, path, "attention scaled by 1/sqrt(head size)");
  require<bool>(j, "scale_attn_by_inverse_layer_idx", false, false, path, "no scaling by layer index");
  require<bool>(j, "add_cross_attention", false, false, path, "a decoder without cross-attention");
  require<bool>(j, "tie_word_embeddings", true, true, path, "GPT-2's head tied to wte");
  c.validate();
  return c;
}

LlamaConfig llama_config(const Json& j, const std::string& path) {
  LlamaConfig c;
  c.family = family_named(get_or<std::string>(j, "model_type", "", path)).value_or(LlamaFamily::kLlama);
  c.qkv_bias = c.family == LlamaFamily::kQwen2;  // Qwen2's attention always has them
  c.vocab_size = get_required<std::int64_t>(j, "vocab_size", path);
  c.n_embd = get_required<std::int64_t>(j, "hidden_size", path);
  c.ffn_hidden = get_required<std::int64_t>(j, "intermediate_size", path);
  c.n_layer = get_required<int>(j, "num_hidden_layers", path);
  c.n_head = get_required<int>(j, "num_attention_heads", path);
  c.n_kv_head = get_or<int>(j, "num_key_value_heads", c.n_head, path);
  c.context = get_or<std::int64_t>(j, "max_position_embeddings", 2048, path);
  c.rope_theta = float(get_or<double>(j, "rope_theta", 10000.0, path));
  c.norm_eps = float(get_or<double>(j, "rms_norm_eps", 1e-6, path));
  c.tie_embeddings = get_or<bool>(j, "tie_word_embeddings", false, path);
  if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) {
    const Json& r = j.at("rope_scaling");
    const std::string scaling =
        r.is_object() ? get_or<std::string>(r, "rope_type", get_or<std::string>(r, "type", "", path), path) : "";
    HT_CHECK(scaling == "llama3", ErrorKind::kConfig,
             "'{}': \"rope_scaling\" is {}; this library carries Llama 3.1's (\"rope_type\": \"llama3\") only, not "
             "linear, dynamic, YaRN or LongRoPE scaling",
             path, r.dump());
    c.rope_scaling.factor = float(get_required<double>(r, "factor", path));
    c.rope_scaling.low_freq_factor = float(get_required<double>(r, "low_freq_factor", path));
    c.rope_scaling.high_freq_factor = float(get_required<double>(r, "high_freq_factor", path));
    c.rope_scaling.original_max_positions = get_required<std::int64_t>(r, "original_max_position_embeddings", path);
    const double attention_factor = get_or<double>(r, "attention_factor", 1.0, path);
    HT_CHECK(attention_factor == 1.0, ErrorKind::kConfig,
             "'{}': rope_scaling's \"attention_factor\" is {}; Llama 3.1's scaling leaves attention unscaled (1)", path,
             attention_factor);
  }
  if (c.family == LlamaFamily::kMistral) {
    // Mistral is Llama's computation with an optional sliding window: none
    // (null: Mistral 7B v0.2 on), or one no shorter than the context, which
    // hides nothing. An absent key is transformers' default, 4096.
    const std::int64_t window =
        j.contains("sliding_window") ? get_or<std::int64_t>(j, "sliding_window", c.context, path) : 4096;
    HT_CHECK(window >= c.context, ErrorKind::kConfig,
             "'{}': \"sliding_window\" is {}, shorter than \"max_position_embeddings\" {}; this library's attention "
             "has no sliding window, so a Mistral is read only without one (Mistral 7B v0.2 and later)",
             path, window, c.context);
  }
  if (c.family == LlamaFamily::kQwen2) {
    // Qwen2's sliding window is used only with use_sliding_window, on the
    // layers from max_window_layers on; this library's attention has none.
    const bool sliding = get_or<bool>(j, "use_sliding_window", false, path);
    const std::int64_t window = get_or<std::int64_t>(j, "sliding_window", c.context, path);
    const int window_layers = get_or<int>(j, "max_window_layers", c.n_layer, path);
    HT_CHECK(!sliding || window >= c.context || window_layers >= c.n_layer, ErrorKind::kConfig,
             "'{}': \"use_sliding_window\" is true with a window of {} on layers {} and on, shorter than the "
             "context {}; this library's attention has no sliding window",
             path, window, window_layers, c.context);
  }
  require<std::string>(j, "hidden_act", "silu", "silu", path, "SwiGLU's SiLU");
  require<bool>(j, "attention_bias", false, false, path, "projections without biases");
  require<bool>(j, "mlp_bias", false, false, path, "projections without biases");
  require<int>(j, "pretraining_tp", 1, 1, path, "one slice per projection");
  HT_CHECK(c.n_head > 0 && c.n_embd % c.n_head == 0, ErrorKind::kConfig,
           "'{}': \"num_attention_heads\" {} does not divide \"hidden_size\" {}", path, c.n_head, c.n_embd);
  const std::int64_t head_dim = get_or<std::int64_t>(j, "head_dim", c.n_embd / c.n_head, path);
  HT_CHECK(head_dim == c.n_embd / c.n_head, ErrorKind::kConfig,
           "'{}': \"head_dim\" is {}; this library's heads are hidden_size / num_attention_heads = {}", path,
           head_dim, c.n_embd / c.n_head);
  c.validate();
  return c;
}

// A float as the shortest decimal that reads back as it (1e-06, not
// 9.99999997e-07): what a person wrote in the config it came from.
double shortest(float v) { return std::stod(fmt::format("{}", v)); }

std::string config_path(const std::string& dir) {
  return fs::is_directory(dir) ? (fs::path(dir) / "config.json").string() : dir;
}

}  // namespace

ModelConfig read_hf_config(const std::string& dir) {
  const std::string path = config_path(dir);
  const Json j = read_json(path);
  HT_CHECK(j.is_object(), ErrorKind::kIo, "'{}' is not a JSON object: not a Hugging Face config", path);
  const std::string type = get_or<std::string>(j, "model_type", "", path);
  if (type == "gpt2") return gpt_config(j, path);
  if (family_named(type)) return llama_config(j, path);
  throw Error(ErrorKind::kConfig,
              fmt::format("'{}': \"model_type\" is \"{}\"; this library reads Hugging Face's \"gpt2\" "
                          "(GPT2LMHeadModel), \"llama\" (LlamaForCausalLM), \"mistral\" (MistralForCausalLM) and "
                          "\"qwen2\" (Qwen2ForCausalLM)",
                          path, type));
}

std::string hf_config_json(const ModelConfig& config, const std::string& torch_dtype) {
  Json j;
  if (const auto* g = std::get_if<GPTConfig>(&config)) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = g->vocab_size;
    j["n_positions"] = g->context;
    j["n_ctx"] = g->context;
    j["n_embd"] = g->n_embd;
    j["n_layer"] = g->n_layer;
    j["n_head"] = g->n_head;
    j["n_inner"] = nullptr;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = 1e-5;
    j["scale_attn_weights"] = true;
    j["tie_word_embeddings"] = true;
    if (g->vocab_size == 50257) j["bos_token_id"] = j["eos_token_id"] = 50256;  // GPT-2's <|endoftext|>
  } else {
    const LlamaConfig& l = std::get<LlamaConfig>(config);
    entries_of(l);  // refuses a mixture of experts, and q/k/v biases outside a Qwen2
    const bool mistral = l.family == LlamaFamily::kMistral, qwen2 = l.family == LlamaFamily::kQwen2;
    j["architectures"] = {mistral ? "MistralForCausalLM" : qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
    j["model_type"] = family_name(l.family);
    j["vocab_size"] = l.vocab_size;
    j["hidden_size"] = l.n_embd;
    j["intermediate_size"] = l.ffn_hidden;
    j["num_hidden_layers"] = l.n_layer;
    j["num_attention_heads"] = l.n_head;
    j["num_key_value_heads"] = l.n_kv_head;
    j["head_dim"] = l.n_embd / l.n_head;
    j["max_position_embeddings"] = l.context;
    j["rms_norm_eps"] = shortest(l.norm_eps);
    j["rope_theta"] = shortest(l.rope_theta);
    if (l.rope_scaling.enabled())
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", shortest(l.rope_scaling.factor)},
                           {"low_freq_factor", shortest(l.rope_scaling.low_freq_factor)},
                           {"high_freq_factor", shortest(l.rope_scaling.high_freq_factor)},
                           {"original_max_position_embeddings", l.rope_scaling.original_max_positions}};
    else
      j["rope_scaling"] = nullptr;
    j["hidden_act"] = "silu";
    if (!qwen2) {  // Qwen2's biases are not a setting
      j["attention_bias"] = false;
      j["mlp_bias"] = false;
    }
    j["tie_word_embeddings"] = l.tie_embeddings;
    if (mistral) j["sliding_window"] = nullptr;
    if (qwen2) {
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
      j["max_window_layers"] = l.n_layer;
    }
  }
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

HFWeights HFWeights::open(const std::string& dir, const ModelConfig& config) {
  HFWeights w;
  w.dir_ = dir;
  w.config_ = config;
  w.file_ = std::make_shared<const ckpt::SafetensorsCheckpoint>(ckpt::SafetensorsCheckpoint::open(dir));
  const ckpt::SafetensorsCheckpoint& f = *w.file_;
  const bool gpt = std::holds_alternative<GPTConfig>(config);
  if (gpt && f.contains("transformer.wte.weight")) w.prefix_ = "transformer.";
  const std::vector<Entry> entries = entries_of(config);
  auto by_name = std::make_shared<std::map<std::string, Entry>>();
  for (const Entry& e : entries) by_name->emplace(e.ours, e);
  w.entries_ = std::move(by_name);
  std::set<std::string> used;
  for (const Entry& e : entries)
    for (const std::string& hf : e.hf) {
      const std::string name = w.prefix_ + hf;
      HT_CHECK(f.contains(name), ErrorKind::kIo,
               "the weights in '{}' have no tensor '{}', which {} needs: not the model config.json describes", dir,
               name, describe(config));
      const ckpt::SafetensorsEntry& s = f.entry(name);
      HT_CHECK(s.shape == e.hf_shape(), ErrorKind::kIo, "'{}' in '{}' has shape [{}]; {} needs [{}]", name,
               f.file_of(name).path(), fmt::join(s.shape, ", "), describe(config), fmt::join(e.hf_shape(), ", "));
      HT_CHECK(s.tensor_dtype() && s.dtype != "I32", ErrorKind::kIo,
               "'{}' in '{}' is stored as {}; weights are read from F32, F16 or BF16", name, f.file_of(name).path(),
               s.dtype);
      used.insert(name);
    }
  // A head stored beside a tied embedding is taken only when it is the
  // embedding (transformers writes both for some tied models).
  const std::string embedding = gpt ? w.prefix_ + "wte.weight" : "model.embed_tokens.weight";
  for (const std::string& name : f.names()) {
    if (used.contains(name) || skipped_buffer(name)) continue;
    if (name == "lm_head.weight") {
      const auto head = f.file_of(name).bytes(name), emb = f.file_of(embedding).bytes(embedding);
      HT_CHECK(f.entry(name).dtype == f.entry(embedding).dtype && head.size() == emb.size() &&
                   std::memcmp(head.data(), emb.data(), head.size()) == 0,
               ErrorKind::kConfig,
               "'{}' holds an lm_head.weight that differs from {}, but the model's head is tied to the embedding "
               "(config.json's tie_word_embeddings): this library would drop the head's own values",
               dir, embedding);
      continue;
    }
    fail_io(fmt::format("the weights in '{}' hold '{}', which {} does not have: not the model config.json "
                        "describes, or an architecture this library does not read",
                        dir, name, describe(config)));
  }
  return w;
}

Tensor HFWeights::initial_value(const nn::Parameter& p) const {
  const auto it = entries_->find(p.name());
  HT_CHECK_ARG(it != entries_->end(), "parameter '{}' has no Hugging Face tensor in the {} format of {}", p.name(),
               describe(config_), dir_);
  const Entry& e = it->second;
  const Shape& full = p.full_shape();
  HT_CHECK_ARG(full.size() == e.shape.size() && (e.vocab_rows ? full.at(0) >= e.shape.at(0) : full == e.shape) &&
                   std::equal(full.begin() + 1, full.end(), e.shape.begin() + 1),
               "parameter '{}' has shape [{}]; the Hugging Face model {} gives [{}]", p.name(), fmt::join(full, ", "),
               describe(config_), fmt::join(e.shape, ", "));
  const nn::ParamLayout& layout = p.layout();
  const int n = layout.tp_size, r = layout.tp_rank;
  // Rows this rank holds are read alone when the file's rows are its rows:
  // a matrix split by rows (in as many stacked pieces as the file has
  // tensors: gate_proj and up_proj), or GPT-2's Conv1D split by this
  // library's columns, which are the file's rows.
  if (layout.tp_split() && layout.tp_split_dim == 0 && e.change != Change::kTranspose &&
      layout.tp_parts == int(e.hf.size())) {
    Tensor part = Tensor::zeros(nn::tp_part_shape(full, layout), DType::kF32);  // padding rows stay zero
    const std::int64_t piece = full.at(0) / layout.tp_parts, rows = piece / n;
    for (std::size_t i = 0; i < e.hf.size(); ++i) {
      const std::int64_t real = e.vocab_rows ? e.shape.at(0) : piece;
      const std::int64_t begin = r * rows, end = std::min(begin + rows, real);
      if (begin < end)
        ops::narrow_into(as_f32(file_->read_rows(prefix_ + e.hf[i], begin, end)), 0, std::int64_t(i) * rows, part);
    }
    return part;
  }
  if (layout.tp_split() && layout.tp_split_dim == 1 && e.change == Change::kTranspose && layout.tp_parts == 1) {
    const std::int64_t rows = full.at(1) / n;
    return transposed(as_f32(file_->read_rows(prefix_ + e.hf.front(), r * rows, (r + 1) * rows)));
  }
  // Otherwise the whole tensor, cut to this rank's part.
  Tensor value = Tensor::zeros(full, DType::kF32);  // a padded vocabulary's extra rows stay zero
  std::int64_t row = 0;
  for (const std::string& hf : e.hf) {
    Tensor t = as_f32(file_->read(prefix_ + hf));
    if (e.change == Change::kTranspose) t = transposed(t);
    ops::narrow_into(t, 0, row, value);
    row += t.size(0);
  }
  return nn::tp_part_of(value, layout);
}

void HFWeights::load_into(nn::Model& model) const {
  for (nn::Parameter* p : model.parameters())
    if (p->data().defined()) p->data().copy_from(initial_value(*p));
}

namespace {
// FullParameters over tensors in memory (which must outlive it).
FullParameters in_memory(const std::map<std::string, Tensor>& full) {
  FullParameters params;
  for (const auto& [name, t] : full) params.shapes.emplace(name, t.shape());
  params.value = [&full](const std::string& name) { return full.at(name); };
  return params;
}
}  // namespace

ckpt::TensorSources to_hf_sources(const ModelConfig& config, const FullParameters& full, DType dtype) {
  const std::vector<Entry> entries = entries_of(config);
  std::set<std::string> ours;
  for (const Entry& e : entries) ours.insert(e.ours);
  for (const auto& [name, shape] : full.shapes)
    HT_CHECK_ARG(ours.contains(name), "parameter '{}' has no place in the Hugging Face format of {}", name,
                 describe(config));
  // The parameter last asked for, kept for the next source of the same
  // one (gate_proj, then up_proj) and dropped when another is asked for.
  struct Held {
    std::string name;
    Tensor value;
  };
  auto held = std::make_shared<Held>();
  const std::string prefix = std::holds_alternative<GPTConfig>(config) ? "transformer." : "";
  ckpt::TensorSources out;
  for (const Entry& e : entries) {
    const auto it = full.shapes.find(e.ours);
    HT_CHECK_ARG(it != full.shapes.end(), "the parameters of {} lack '{}'", describe(config), e.ours);
    const Shape& shape = it->second;
    HT_CHECK_ARG(shape.size() == e.shape.size() && std::equal(e.shape.begin() + 1, e.shape.end(), shape.begin() + 1) &&
                     (e.vocab_rows ? shape.at(0) >= e.shape.at(0) : shape.at(0) == e.shape.at(0)),
                 "parameter '{}' has shape [{}]; {} has [{}]", e.ours, fmt::join(shape, ", "), describe(config),
                 fmt::join(e.shape, ", "));
    for (std::size_t i = 0; i < e.hf.size(); ++i)
      out.push_back({prefix + e.hf[i], dtype, e.hf_shape(), [e, i, dtype, held, value = full.value] {
                       if (held->name != e.ours) {
                         held->value = Tensor();  // one parameter at a time
                         held->name = e.ours;
                         held->value = value(e.ours);
                         if (!held->value.device().is_cpu()) held->value = held->value.to(Device::cpu());
                       }
                       Tensor t = held->value;
                       if (e.vocab_rows) t = t.slice(0, e.shape.at(0));  // the padding rows are not part of the model
                       if (e.change == Change::kStackRows) {
                         const std::int64_t rows = t.size(0) / std::int64_t(e.hf.size());
                         t = t.slice(std::int64_t(i) * rows, std::int64_t(i + 1) * rows);
                       }
                       if (e.change == Change::kTranspose) t = transposed(t);
                       t = as_dtype(t, dtype);  // shares the parameter's storage when nothing changed
                       if (i + 1 == e.hf.size()) *held = Held{};  // its last tensor: let it go
                       return t;
                     }});
  }
  return out;
}

ckpt::NamedTensors to_hf_tensors(const ModelConfig& config, const std::map<std::string, Tensor>& full, DType dtype) {
  ckpt::NamedTensors out;
  for (const ckpt::TensorSource& s : to_hf_sources(config, in_memory(full), dtype)) out.emplace_back(s.name, s.values());
  return out;
}

void write_hf_model(const std::string& dir, const ModelConfig& config, const FullParameters& full, DType dtype,
                    std::int64_t max_shard_bytes) {
  const std::string torch_dtype = dtype == DType::kF32    ? "float32"
                                  : dtype == DType::kBF16 ? "bfloat16"
                                  : dtype == DType::kF16  ? "float16"
                                                          : "";
  HT_CHECK_ARG(!torch_dtype.empty(), "Hugging Face weights are written as f32, bf16 or f16, not {}",
               dtype_name(dtype));
  const std::string json = hf_config_json(config, torch_dtype);
  const ckpt::TensorSources tensors = to_hf_sources(config, full, dtype);
  ckpt::SafetensorsShardOptions shards;
  shards.max_shard_bytes = max_shard_bytes;
  ckpt::write_safetensors_sharded(dir, tensors, shards);  // creates `dir` if missing
  ::ht::detail::write_file_replacing((fs::path(dir) / "config.json").string(), json, true, "Hugging Face config");
}

void write_hf_model(const std::string& dir, const ModelConfig& config, const std::map<std::string, Tensor>& full,
                    DType dtype, std::int64_t max_shard_bytes) {
  write_hf_model(dir, config, in_memory(full), dtype, max_shard_bytes);
}

}  // namespace ht::models
