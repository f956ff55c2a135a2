// A language model (models::GPT or models::Llama) trained by train::Engine on
// token splits, for the training tests: the model config, sequence length
// and engine options in one struct, and an owner that builds the
// TokenBatches before the engine and destroys them after it (the engine
// draws from them until it is gone).
#pragma once

#include <cstdint>
#include <memory>

#include "ht/comm/device_mesh.h"
#include "ht/data/token_batches.h"
#include "ht/models/gpt.h"
#include "ht/models/llama.h"
#include "ht/train/engine.h"

namespace ht::test {

template <typename Config>
struct LmRunOptions {
  Config model;
  std::int64_t seq_len = 16;  // tokens per training window
  train::EngineOptions engine;
};

/// A `Model` engine on `splits` (which must outlive it) over `mesh` (null:
/// this process alone). Collective over the mesh, like the Engine it holds.
template <typename Model, typename Config>
struct LmEngine {
  LmEngine(const LmRunOptions<Config>& options, const data::TokenSplits& splits, comm::DeviceMesh* mesh = nullptr)
      : batches(splits, options.seq_len),
        engine(
            options.engine,
            [config = options.model](const nn::Placement& at) { return std::make_unique<Model>(config, at); },
            batches, mesh) {}

  data::TokenBatches batches;  // declared before `engine`: built first, destroyed last
  train::Engine engine;
};

using GPTRunOptions = LmRunOptions<models::GPTConfig>;

/// The tests' tiny GPT (V256 T32 L2 H2 C32) on 16-token windows, micro-batch
/// 4, lr 3e-3 after 2 warm-up steps, for `steps` steps.
inline GPTRunOptions tiny_gpt_options(std::int64_t steps) {
  GPTRunOptions o;
  o.model = {.vocab_size = 256, .context = 32, .n_layer = 2, .n_head = 2, .n_embd = 32};
  o.seq_len = 16;
  o.engine.layout.micro_batch = 4;
  o.engine.steps = steps;
  o.engine.warmup_steps = 2;
  o.engine.lr = 3e-3f;
  return o;
}
using GPTEngine = LmEngine<models::GPT, models::GPTConfig>;
using LlamaRunOptions = LmRunOptions<models::LlamaConfig>;
using LlamaEngine = LmEngine<models::Llama, models::LlamaConfig>;

}  // namespace ht::test
