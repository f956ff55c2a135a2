// ht::train::Trainer: the single-process training loop for GPT models —
// micro-batches with gradient accumulation, global-norm clipping, AdamW with
// warm-up + cosine schedule, periodic validation and metrics.
//
// Later layers (data parallelism, checkpoints, resilience) extend this loop;
// its options hold everything a run is configured by.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ht/data/batch_sampler.h"
#include "ht/data/token_dataset.h"
#include "ht/nn/gpt.h"
#include "ht/optim/adamw.h"
#include "ht/optim/lr_schedule.h"

namespace ht::train {

struct TrainerOptions {
  nn::GPTConfig model;
  Device device = Device::cpu();
  std::int64_t steps = 100;
  std::int64_t micro_batch = 8;  // sequences per micro-batch
  std::int64_t seq_len = 128;
  int grad_accum = 1;  // micro-batches per optimizer step
  float lr = 1e-3f;
  float min_lr = 1e-4f;
  std::int64_t warmup_steps = 20;
  float grad_clip = 1.f;  // max global norm; <= 0 disables
  optim::AdamWOptions adamw;
  std::uint64_t seed = 1337;
  std::int64_t eval_every = 25;  // 0: only at the end
  std::int64_t eval_batches = 8;

  /// Throws kConfig naming the bad value.
  void validate() const;
};

struct StepStats {
  std::int64_t step = 0;  // 1-based
  float loss = 0.f;       // mean over the step's micro-batches
  float lr = 0.f;
  float grad_norm = 0.f;
  double ms = 0.0;
  std::int64_t tokens = 0;
  double tokens_per_s() const { return ms > 0 ? double(tokens) * 1000.0 / ms : 0.0; }
};

class Trainer {
 public:
  /// Builds and initialises the model and optimizer. `splits` must outlive the trainer.
  Trainer(const TrainerOptions& options, const data::TokenSplits& splits);

  /// One optimizer step (grad_accum micro-batches).
  StepStats step();
  /// Mean loss over `eval_batches` sequential validation batches.
  float evaluate();
  std::int64_t steps_done() const { return optimizer_->step_count(); }

  nn::GPT& model() { return *model_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  const TrainerOptions& options() const { return options_; }

 private:
  TrainerOptions options_;
  const data::TokenSplits& splits_;
  std::unique_ptr<nn::GPT> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  optim::CosineSchedule schedule_;
  data::BatchSampler train_sampler_;
  data::BatchSampler val_sampler_;
};

/// The unigram entropy (nats per token) of a token array: the loss of the best
/// model that ignores context; a trained model should end well below it.
double unigram_entropy(const std::vector<std::int32_t>& tokens, std::int64_t vocab_size);

}  // namespace ht::train
