// ht::train::Trainer: the single-process training loop.
#include "ht/train/trainer.h"

#include <chrono>
#include <cmath>

#include "ht/optim/clip.h"

namespace ht::train {

void TrainerOptions::validate() const {
  model.validate();
  HT_CHECK(steps >= 0, ErrorKind::kConfig, "--steps must be >= 0, got {}", steps);
  HT_CHECK(micro_batch > 0, ErrorKind::kConfig, "--micro-batch must be positive, got {}", micro_batch);
  HT_CHECK(seq_len > 0 && seq_len <= model.context, ErrorKind::kConfig,
           "--seq-len {} must lie in [1, context={}]; raise --context or shorten --seq-len", seq_len, model.context);
  HT_CHECK(grad_accum > 0, ErrorKind::kConfig, "--grad-accum must be positive, got {}", grad_accum);
  HT_CHECK(lr > 0.f && min_lr >= 0.f && min_lr <= lr, ErrorKind::kConfig,
           "learning rates must satisfy 0 <= min_lr ({}) <= lr ({}), lr > 0", min_lr, lr);
  HT_CHECK(warmup_steps >= 0 && eval_every >= 0 && eval_batches > 0, ErrorKind::kConfig,
           "--warmup ({}) and --eval-every ({}) must be >= 0, --eval-batches ({}) positive", warmup_steps, eval_every,
           eval_batches);
}

Trainer::Trainer(const TrainerOptions& options, const data::TokenSplits& splits)
    : options_((options.validate(), options)),
      splits_(splits),
      train_sampler_(splits.train, options.seq_len, options.micro_batch, options.seed),
      val_sampler_(splits.val, options.seq_len, options.micro_batch, options.seed) {
  HT_CHECK(splits.vocab_size <= options.model.vocab_size, ErrorKind::kConfig,
           "the dataset's vocabulary ({}) is larger than the model's vocab_size ({})", splits.vocab_size,
           options.model.vocab_size);
  model_ = std::make_unique<nn::GPT>(options.model, options.device);
  model_->init_weights(options.seed);
  optimizer_ = std::make_unique<optim::AdamW>(optim::slots_of(model_->parameters()), options.adamw);
  schedule_ = {options.lr, options.min_lr, options.warmup_steps, std::max<std::int64_t>(options.steps, 1)};
}

StepStats Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  StepStats s;
  s.step = optimizer_->step_count() + 1;
  model_->zero_grad();
  double loss_sum = 0.0;
  for (int micro = 0; micro < options_.grad_accum; ++micro) {
    data::Batch batch = train_sampler_.next();
    nn::Context ctx(options_.device);
    const Tensor tokens = batch.tokens.to(options_.device);
    const Tensor targets = batch.targets.to(options_.device);
    loss_sum += model_->forward_loss(ctx, tokens, targets);
    // Each micro-batch's mean loss weighs 1/k: the sum equals one k-times batch.
    model_->backward_loss(ctx, 1.f / float(options_.grad_accum));
  }
  std::vector<Tensor> grads;
  for (const optim::Slot& slot : optimizer_->slots()) grads.push_back(slot.grad);
  s.grad_norm = optim::global_grad_norm(grads);
  s.lr = schedule_.lr(s.step - 1);
  optimizer_->step(s.lr, optim::clip_coefficient(s.grad_norm, options_.grad_clip));
  s.loss = float(loss_sum / options_.grad_accum);
  s.tokens = options_.micro_batch * options_.seq_len * options_.grad_accum;
  s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return s;
}

float Trainer::evaluate() {
  double sum = 0.0;
  for (std::int64_t i = 0; i < options_.eval_batches; ++i) {
    data::Batch batch = val_sampler_.sequential(i);
    nn::Context ctx(options_.device, /*save_for_backward=*/false);
    sum += model_->forward_loss(ctx, batch.tokens.to(options_.device), batch.targets.to(options_.device));
  }
  return float(sum / double(options_.eval_batches));
}

double unigram_entropy(const std::vector<std::int32_t>& tokens, std::int64_t vocab_size) {
  std::vector<double> counts(std::size_t(vocab_size), 0.0);
  for (std::int32_t t : tokens) counts[std::size_t(t)] += 1.0;
  double h = 0.0;
  for (double c : counts)
    if (c > 0) {
      const double p = c / double(tokens.size());
      h -= p * std::log(p);
    }
  return h;
}

}  // namespace ht::train
