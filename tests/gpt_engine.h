// A GPT trained by train::Engine on token splits, for the training tests:
// what the old Trainer took (model config, sequence length, training options)
// in one struct, and an owner that builds the TokenBatches before the engine
// and destroys them after it (the engine draws from them until it is gone).
#pragma once

#include <cstdint>
#include <memory>

#include "ht/comm/device_mesh.h"
#include "ht/data/token_batches.h"
#include "ht/models/gpt.h"
#include "ht/train/engine.h"

namespace ht::test {

struct GPTRunOptions {
  models::GPTConfig model;
  std::int64_t seq_len = 16;  // tokens per training window
  train::EngineOptions engine;
};

/// The factory an Engine calls: this rank's part of a GPT, built for the
/// placement the engine gives (stage, tp group, deferred storage).
inline train::ModelFactory gpt_factory(const models::GPTConfig& config) {
  return [config](const nn::Placement& at) { return std::make_unique<models::GPT>(config, at); };
}

/// A GPT engine on `splits` (which must outlive it) over `mesh` (null: this
/// process alone). Collective over the mesh, like the Engine it holds.
struct GPTEngine {
  GPTEngine(const GPTRunOptions& options, const data::TokenSplits& splits, comm::DeviceMesh* mesh = nullptr)
      : batches(splits, options.seq_len), engine(options.engine, gpt_factory(options.model), batches, mesh) {}

  /// This rank's part of the model.
  models::GPT& gpt() { return static_cast<models::GPT&>(engine.model()); }

  data::TokenBatches batches;  // declared before `engine`: built first, destroyed last
  train::Engine engine;
};

}  // namespace ht::test
