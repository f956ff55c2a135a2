// A Llama trained by train::Engine on token splits, for the training tests:
// gpt_engine.h's counterpart (model config, sequence length, engine options
// in one struct, and an owner that builds the TokenBatches before the engine
// and destroys them after it).
#pragma once

#include <cstdint>
#include <memory>

#include "ht/comm/device_mesh.h"
#include "ht/data/token_batches.h"
#include "ht/models/llama.h"
#include "ht/train/engine.h"

namespace ht::test {

struct LlamaRunOptions {
  models::LlamaConfig model;
  std::int64_t seq_len = 16;  // tokens per training window
  train::EngineOptions engine;
};

/// The factory an Engine calls: this rank's part of a Llama, built for the
/// placement the engine gives (stage, tp group, deferred storage).
inline train::ModelFactory llama_factory(const models::LlamaConfig& config) {
  return [config](const nn::Placement& at) { return std::make_unique<models::Llama>(config, at); };
}

/// A Llama engine on `splits` (which must outlive it) over `mesh` (null:
/// this process alone). Collective over the mesh, like the Engine it holds.
struct LlamaEngine {
  LlamaEngine(const LlamaRunOptions& options, const data::TokenSplits& splits, comm::DeviceMesh* mesh = nullptr)
      : batches(splits, options.seq_len), engine(options.engine, llama_factory(options.model), batches, mesh) {}

  /// This rank's part of the model.
  models::Llama& llama() { return static_cast<models::Llama&>(engine.model()); }

  data::TokenBatches batches;  // declared before `engine`: built first, destroyed last
  train::Engine engine;
};

}  // namespace ht::test
