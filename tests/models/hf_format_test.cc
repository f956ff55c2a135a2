// models/hf_format.h without PyTorch: model descriptions parsed back, the
// config.json refusals, a tied head's checks and the tensor list of an
// export. (hf_torch_check.py compares the numbers with PyTorch.)
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <set>

#include "ht/models/hf_format.h"
#include "ht/models/model_flags.h"
#include "test_util.h"

namespace ht {
namespace {

namespace fs = std::filesystem;

// The error `fn` throws, or "" when it throws none.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / fmt::format("hf_format_test_{}", ::getpid());
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

models::LlamaConfig tiny_llama() {
  return {.vocab_size = 10, .context = 8, .n_layer = 1, .n_head = 2, .n_kv_head = 1, .n_embd = 4, .ffn_hidden = 6};
}

TEST(HFFormat, DescriptionsParseBackForEveryPreset) {
  for (const models::ModelPreset& p : models::model_presets()) {
    const std::string d = models::describe(p.config);
    EXPECT_EQ(models::describe(models::parse_model_description(d)), d) << p.name;
  }
  models::LlamaConfig l = tiny_llama();
  l.norm_eps = 1e-6f;
  l.tie_embeddings = true;
  l.vocab_multiple = 8;
  const std::string d = models::describe(l);
  EXPECT_EQ(d, "Llama L1 H2 KV1 C4 F6 V10 Vp16 T8 theta10000 eps1e-06 tied");
  const auto back = std::get<models::LlamaConfig>(models::parse_model_description(d));
  EXPECT_EQ(models::describe(back), d);
  EXPECT_TRUE(back.tie_embeddings);
  EXPECT_EQ(back.norm_eps, 1e-6f);
  EXPECT_EQ(back.padded_vocab_size(), 16);
  l.rope_scaling = {.factor = 8.f, .low_freq_factor = 1.f, .high_freq_factor = 4.f, .original_max_positions = 8192};
  const std::string scaled = models::describe(l);
  EXPECT_EQ(scaled, "Llama L1 H2 KV1 C4 F6 V10 Vp16 T8 theta10000 llama3x8,1,4,8192 eps1e-06 tied");
  EXPECT_EQ(std::get<models::LlamaConfig>(models::parse_model_description(scaled)).rope_scaling, l.rope_scaling);
  EXPECT_NE(error_of([] { models::parse_model_description("Regressor D8"); }).find("no architecture"),
            std::string::npos);
  EXPECT_NE(error_of([] { models::parse_model_description("GPT L2 H2 C8 V16 T8 X3"); }).find("'X3'"),
            std::string::npos);
}

TEST(HFFormat, ConfigRefusesWhatCannotBeCarried) {
  TempDir dir;
  const std::string gpt = R"({"model_type": "gpt2", "vocab_size": 16, "n_positions": 8, "n_embd": 8, "n_layer": 1,
                              "n_head": 2)";
  dir.write("config.json", gpt + "}");
  const auto g = std::get<models::GPTConfig>(models::read_hf_config(dir.path.string()));
  EXPECT_EQ(g.str(), "L1 H2 C8 V16 T8");
  dir.write("config.json", gpt + R"(, "n_inner": 64})");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("\"n_inner\" is 64"),
            std::string::npos);
  dir.write("config.json", gpt + R"(, "layer_norm_epsilon": 1e-6})");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("layer_norm_epsilon"),
            std::string::npos);
  const std::string llama = R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 4, "intermediate_size": 6,
                                "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1)";
  dir.write("config.json", llama + R"(, "head_dim": 4})");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("\"head_dim\" is 4"),
            std::string::npos);
  dir.write("config.json", llama + R"(, "attention_bias": true})");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("attention_bias"), std::string::npos);
  dir.write("config.json", llama + R"(, "rms_norm_eps": 1e-5, "tie_word_embeddings": true})");
  const auto l = std::get<models::LlamaConfig>(models::read_hf_config(dir.path.string()));
  EXPECT_TRUE(l.tie_embeddings);
  EXPECT_EQ(l.norm_eps, 1e-5f);
  dir.write("config.json", llama + R"(, "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  const auto l3 = std::get<models::LlamaConfig>(models::read_hf_config(dir.path.string()));
  EXPECT_EQ(l3.rope_scaling.factor, 32.f);
  EXPECT_EQ(l3.rope_scaling.original_max_positions, 8192);
  EXPECT_NE(models::hf_config_json(l3).find("\"original_max_position_embeddings\": 8192"), std::string::npos);
  dir.write("config.json", llama + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("llama3"), std::string::npos);
  dir.write("config.json", R"({"model_type": "qwen3"})");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("\"qwen3\""), std::string::npos);
  // A Mistral is its Llama, named so on export; a sliding window that would
  // hide a position is refused, and so is transformers' default of 4096.
  std::string mistral = llama;
  mistral.replace(mistral.find("\"llama\""), 7, "\"mistral\"");
  dir.write("config.json", mistral + R"(, "max_position_embeddings": 64, "sliding_window": null})");
  const auto m = std::get<models::LlamaConfig>(models::read_hf_config(dir.path.string()));
  EXPECT_EQ(m.family, models::LlamaFamily::kMistral);
  EXPECT_EQ(models::describe(models::parse_model_description(models::describe(m))), models::describe(m));
  EXPECT_NE(models::describe(m).find(" mistral"), std::string::npos);
  const std::string written = models::hf_config_json(m);
  EXPECT_NE(written.find("\"MistralForCausalLM\""), std::string::npos);
  EXPECT_NE(written.find("\"sliding_window\": null"), std::string::npos);
  dir.write("config.json", written);
  EXPECT_EQ(models::describe(models::read_hf_config(dir.path.string())), models::describe(m));
  dir.write("config.json", mistral + R"(, "max_position_embeddings": 64, "sliding_window": 64})");
  EXPECT_EQ(std::get<models::LlamaConfig>(models::read_hf_config(dir.path.string())).family,
            models::LlamaFamily::kMistral);
  dir.write("config.json", mistral + R"(, "max_position_embeddings": 64, "sliding_window": 32})");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("\"sliding_window\" is 32"),
            std::string::npos);
  // A Qwen2 is its Llama with q, k and v biases.
  std::string qwen2 = llama;
  qwen2.replace(qwen2.find("\"llama\""), 7, "\"qwen2\"");
  dir.write("config.json", qwen2 + R"(, "use_sliding_window": false, "sliding_window": 4, "max_window_layers": 1})");
  const auto q = std::get<models::LlamaConfig>(models::read_hf_config(dir.path.string()));
  EXPECT_EQ(q.family, models::LlamaFamily::kQwen2);
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_EQ(models::describe(models::parse_model_description(models::describe(q))), models::describe(q));
  EXPECT_NE(models::describe(q).find(" qkvbias qwen2"), std::string::npos);
  dir.write("config.json", models::hf_config_json(q));
  EXPECT_EQ(models::describe(models::read_hf_config(dir.path.string())), models::describe(q));
  EXPECT_EQ(models::hf_config_json(q).find("attention_bias"), std::string::npos);
  dir.write("config.json", qwen2 + R"(, "max_position_embeddings": 64, "use_sliding_window": true, "sliding_window": 16,
                           "max_window_layers": 0})");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("use_sliding_window"),
            std::string::npos);
  // q, k and v biases have no Hugging Face Llama to go to; a Qwen2 has them always.
  models::LlamaConfig biased = tiny_llama();
  biased.qkv_bias = true;
  EXPECT_NE(error_of([&] { models::hf_config_json(biased); }).find("outside a Qwen2"), std::string::npos);
  biased.qkv_bias = false;
  biased.family = models::LlamaFamily::kQwen2;
  EXPECT_NE(error_of([&] { models::hf_config_json(biased); }).find("without q, k and v biases"), std::string::npos);
  dir.write("config.json", mistral + R"(, "max_position_embeddings": 8192})");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("\"sliding_window\" is 4096"),
            std::string::npos);
  fs::remove(dir.path / "config.json");
  EXPECT_NE(error_of([&] { models::read_hf_config(dir.path.string()); }).find("config.json"), std::string::npos);
}

// --init-from takes the model from config.json: a size flag that would
// change it, or another architecture than the program's, is refused by
// name; --vocab-multiple pads it.
TEST(HFFormat, InitFromFlags) {
  TempDir dir;
  dir.write("config.json", R"({"model_type": "gpt2", "vocab_size": 50, "n_positions": 8, "n_embd": 8, "n_layer": 1,
                               "n_head": 2})");
  auto resolve = [&](const std::string& arch, std::vector<std::string> args) {
    CLI::App app;
    models::ModelFlags flags(arch, arch == "gpt" ? "gpt-small" : "llama-small");
    flags.add_to(app);
    args.insert(args.begin(), {"--init-from", dir.path.string()});
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
    return flags.resolve();
  };
  EXPECT_EQ(models::describe(resolve("gpt", {})), "GPT L1 H2 C8 V50 T8");
  EXPECT_EQ(models::describe(resolve("gpt", {"--vocab-multiple", "64"})), "GPT L1 H2 C8 V50 Vp64 T8");
  EXPECT_NE(error_of([&] { resolve("gpt", {"--layers", "3"}); }).find("--layers would change the model"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve("llama", {}); }).find("use gpt_train"), std::string::npos);
}

// A tied Llama has no head of its own: an lm_head.weight beside the
// embedding is taken only when it holds the embedding's bits.
TEST(HFFormat, TiedHeadMustEqualTheEmbedding) {
  TempDir dir;
  models::LlamaConfig c = tiny_llama();
  c.tie_embeddings = true;
  models::Llama model(c);
  model.init_weights(3);
  std::map<std::string, Tensor> full;
  for (nn::Parameter* p : model.parameters()) full.emplace(p->name(), p->data());
  EXPECT_FALSE(full.contains("lm_head.weight"));
  ckpt::NamedTensors tensors = models::to_hf_tensors(c, full);
  const Tensor embedding = tensors.front().second;
  ASSERT_EQ(tensors.front().first, "model.embed_tokens.weight");
  tensors.emplace_back("lm_head.weight", embedding.clone());
  ckpt::write_safetensors((dir.path / "model.safetensors").string(), tensors);
  models::HFWeights::open(dir.path.string(), c);  // the same bits: taken
  Tensor other = embedding.clone();
  other.data<float>()[0] += 1.f;
  tensors.back().second = other;
  ckpt::write_safetensors((dir.path / "model.safetensors").string(), tensors);
  EXPECT_NE(error_of([&] { models::HFWeights::open(dir.path.string(), c); }).find("differs from"),
            std::string::npos);
}

TEST(HFFormat, ExportNamesEveryParameterOnce) {
  const models::LlamaConfig c = tiny_llama();
  models::Llama model(c);
  model.init_weights(5);
  std::map<std::string, Tensor> full;
  for (nn::Parameter* p : model.parameters()) full.emplace(p->name(), p->data());
  const ckpt::NamedTensors t = models::to_hf_tensors(c, full, DType::kBF16);
  ASSERT_EQ(t.size(), full.size() + 1);  // gate_up is two tensors
  EXPECT_EQ(t.back().first, "lm_head.weight");
  for (const auto& [name, value] : t) EXPECT_EQ(value.dtype(), DType::kBF16) << name;
  full.emplace("extra.weight", Tensor::zeros({2}, DType::kF32));
  EXPECT_NE(error_of([&] { models::to_hf_tensors(c, full); }).find("'extra.weight'"), std::string::npos);
  full.erase("extra.weight");
  full.erase("norm.weight");
  EXPECT_NE(error_of([&] { models::to_hf_tensors(c, full); }).find("'norm.weight'"), std::string::npos);
  models::LlamaConfig moe = c;
  moe.experts = 2;
  EXPECT_NE(error_of([&] { models::hf_config_json(moe); }).find("mixture of experts"), std::string::npos);
}

// The writer's sources ask for each parameter once, only when the writer
// reaches it, and hold none after it: an export from a checkpoint keeps one
// parameter in memory. What they write equals what the in-memory path gives.
TEST(HFFormat, ExportAsksForEachParameterOnceWhenReached) {
  TempDir dir;
  const models::LlamaConfig c = tiny_llama();
  models::Llama model(c);
  model.init_weights(7);
  std::map<std::string, Tensor> full;
  for (nn::Parameter* p : model.parameters()) full.emplace(p->name(), p->data());
  models::FullParameters params;
  for (const auto& [name, t] : full) params.shapes.emplace(name, t.shape());
  std::vector<std::string> asked;
  params.value = [&](const std::string& name) {
    asked.push_back(name);
    return full.at(name).clone();
  };
  const ckpt::TensorSources sources = models::to_hf_sources(c, params, DType::kBF16);
  EXPECT_TRUE(asked.empty());  // nothing is read to build the header
  const ckpt::NamedTensors expected = models::to_hf_tensors(c, full, DType::kBF16);
  ASSERT_EQ(sources.size(), expected.size());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    EXPECT_EQ(sources[i].name, expected[i].first);
    EXPECT_EQ(sources[i].shape, expected[i].second.shape());
  }
  models::write_hf_model(dir.path.string(), c, params, DType::kBF16, 100);  // several shards
  ASSERT_EQ(asked.size(), full.size());  // gate_up once for its two tensors
  EXPECT_EQ(std::set<std::string>(asked.begin(), asked.end()).size(), full.size());
  const ckpt::SafetensorsCheckpoint written = ckpt::SafetensorsCheckpoint::open(dir.path.string());
  EXPECT_GT(written.files().size(), 1u);
  for (const auto& [name, t] : expected) {
    const Tensor back = written.read(name);
    ASSERT_EQ(back.nbytes(), t.nbytes()) << name;
    EXPECT_EQ(std::memcmp(back.data_ptr(), t.data_ptr(), t.nbytes()), 0) << name;
  }
  // A shape that is not the model's is refused before any value is asked for.
  asked.clear();
  params.shapes["norm.weight"] = {c.n_embd + 1};
  EXPECT_NE(error_of([&] { models::write_hf_model((dir.path / "bad").string(), c, params); }).find("'norm.weight'"),
            std::string::npos);
  EXPECT_TRUE(asked.empty());
  EXPECT_FALSE(fs::exists(dir.path / "bad" / "config.json"));
}

}  // namespace
}  // namespace ht
