// The C++ side of tests/formats/interop_check.py: reads files that Python
// wrote byte by byte and prints their contents as JSON, and writes files
// from a JSON description for Python to parse. Commands:
//   st-dump PATH               a safetensors file, index or directory -> JSON
//   st-write SPEC.json PATH    {"tensors": [{name, dtype, shape, values}], "metadata": {...},
//                              "max_shard_bytes": n (optional: PATH is a directory)}
//   tok-dump SPEC              token shards (token_corpus.h spec) -> JSON list of ids
//   tok-write IDS.json PATH FORMAT WIDTH   FORMAT ht|llmc, WIDTH 0|2|4
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ht/ckpt/safetensors.h"
#include "ht/data/token_corpus.h"

namespace {

using Json = nlohmann::json;

Json read_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

Json values_of(const ht::Tensor& t) {
  if (t.dtype() == ht::DType::kI32) return t.to_vector<std::int32_t>();
  return t.to_vector<float>();
}

ht::Tensor tensor_of(const Json& j) {
  const ht::Shape shape = j.at("shape").get<ht::Shape>();
  const ht::DType dtype = ht::parse_dtype(j.at("dtype").get<std::string>());
  if (dtype == ht::DType::kI32) return ht::Tensor::from_vector(j.at("values").get<std::vector<std::int32_t>>(), shape);
  const ht::Tensor f = ht::Tensor::from_vector(j.at("values").get<std::vector<float>>(), shape);
  ht::Tensor out = ht::Tensor::empty(shape, dtype);
  for (std::int64_t i = 0; i < f.numel(); ++i) {
    const float x = f.data<float>()[i];
    if (dtype == ht::DType::kF32) out.data<float>()[i] = x;
    if (dtype == ht::DType::kF16) out.data<ht::f16>()[i] = ht::to_f16(x);
    if (dtype == ht::DType::kBF16) out.data<ht::bf16>()[i] = ht::to_bf16(x);
  }
  return out;
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "st-dump" && argc == 3) {
    const auto c = ht::ckpt::SafetensorsCheckpoint::open(argv[2]);
    Json out = Json::object();
    for (const std::string& name : c.names()) {
      const ht::ckpt::SafetensorsEntry& e = c.entry(name);
      out[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"values", values_of(c.read(name))}};
    }
    std::cout << out.dump() << "\n";
    return 0;
  }
  if (cmd == "st-write" && argc == 4) {
    const Json spec = read_json(argv[2]);
    ht::ckpt::NamedTensors tensors;
    for (const Json& t : spec.at("tensors")) tensors.emplace_back(t.at("name").get<std::string>(), tensor_of(t));
    ht::ckpt::SafetensorsWriteOptions options;
    if (spec.contains("metadata")) options.metadata = spec["metadata"].get<std::map<std::string, std::string>>();
    if (spec.contains("max_shard_bytes"))
      ht::ckpt::write_safetensors_sharded(argv[3], tensors,
                                          {.max_shard_bytes = spec["max_shard_bytes"].get<std::int64_t>(),
                                           .prefix = "model",
                                           .file = options});
    else
      ht::ckpt::write_safetensors(argv[3], tensors, options);
    return 0;
  }
  if (cmd == "tok-dump" && argc == 3) {
    const ht::data::TokenCorpus c = ht::data::TokenCorpus::open(argv[2]);
    std::vector<std::int32_t> ids(std::size_t(c.size()));
    c.read(0, c.size(), ids.data());
    for (const ht::data::TokenShard& s : c.shards()) s.verify();
    std::cout << Json(ids).dump() << "\n";
    return 0;
  }
  if (cmd == "tok-write" && argc == 6) {
    const auto ids = read_json(argv[2]).get<std::vector<std::int32_t>>();
    const std::string format = argv[4];
    ht::data::write_token_shard(
        argv[3], ids,
        {.format = format == "llmc" ? ht::data::TokenShardFormat::kLlmc : ht::data::TokenShardFormat::kHypertrain,
         .token_bytes = std::stoi(argv[5]),
         .vocab_size = 0});
    return 0;
  }
  std::fprintf(stderr, "usage: format_interop st-dump|st-write|tok-dump|tok-write ... (see the source)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "format_interop: %s\n", e.what());
    return 1;
  }
}
