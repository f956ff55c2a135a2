// ht::train::Trainer: the training loop on one rank of a mesh.
#include "ht/train/trainer.h"

#include <chrono>
#include <cmath>

#include "ht/comm/self_communicator.h"
#include "ht/optim/clip.h"
#include "ht/parallel/gather_parameters.h"

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

namespace {

comm::DeviceMesh* mesh_or_own(comm::DeviceMesh* mesh, std::unique_ptr<comm::DeviceMesh>& own) {
  if (mesh) return mesh;
  own = std::make_unique<comm::DeviceMesh>(comm::make_self_communicator("world"), 1, 1);
  return own.get();
}

}  // namespace

Trainer::Trainer(const TrainerOptions& options, const data::TokenSplits& splits, comm::DeviceMesh* mesh)
    : options_((options.validate(), options)),
      splits_(splits),
      mesh_(mesh_or_own(mesh, own_mesh_)),
      train_sampler_(splits.train, options.seq_len, options.micro_batch, options.seed, mesh_->coord().dp,
                     mesh_->layout().dp()),
      val_sampler_(splits.val, options.seq_len, options.micro_batch, options.seed, mesh_->coord().dp,
                   mesh_->layout().dp()) {
  HT_CHECK(splits.vocab_size <= options.model.vocab_size, ErrorKind::kConfig,
           "the dataset's vocabulary ({}) is larger than the model's vocab_size ({})", splits.vocab_size,
           options.model.vocab_size);
  const comm::MeshLayout& layout = mesh_->layout();
  options_.model.validate_parallel(layout.tp(), layout.pp());
  options_.data_parallel.validate(layout.dp());
  model_ = std::make_unique<nn::GPT>(options_.model, options_.device, nn::TensorParallel{&mesh_->tp()},
                                     nn::PipelineStage{mesh_->coord().pp, layout.pp()});
  model_->init_weights(options_.seed);
  dp_ = std::make_unique<parallel::DataParallel>(*model_, *mesh_, options_.data_parallel);
  pipeline_ = std::make_unique<parallel::Pipeline>(*model_, mesh_->pp(), options_.schedule,
                                                   options_.data_parallel.precision.compute);
  optimizer_ = std::make_unique<optim::AdamW>(dp_->slots(), options_.adamw);
  schedule_ = {options_.lr, options_.min_lr, options_.warmup_steps, std::max<std::int64_t>(options_.steps, 1)};
  scaler_ = precision::LossScaler(
      options_.force_loss_scaling || options_.data_parallel.precision.needs_loss_scaling(), options_.loss_scaler);
  HT_CHECK(!options_.resume || !options_.ckpt_dir.empty(), ErrorKind::kConfig,
           "--resume needs a checkpoint directory (--ckpt-dir, or --run-dir for <run-dir>/checkpoints)");
  if (!options_.ckpt_dir.empty()) {
    checkpointer_ = std::make_unique<ckpt::Checkpointer>(
        ckpt::CheckpointOptions{
            .dir = options_.ckpt_dir, .keep = options_.ckpt_keep, .commit_delay = options_.ckpt_commit_delay},
        *mesh_);
    if (options_.resume) resume();
  }
}

void Trainer::resume() {
  const std::optional<ckpt::RunState> run =
      checkpointer_->load_latest(options_.model.str(), optimizer_->slots(), *optimizer_);
  if (!run) return;
  dp_->after_step();  // the working copies follow the loaded master values
  optimizer_->set_step_count(run->optimizer_steps);
  scaler_.set_state(run->scaler);
  train_sampler_.set_position(run->sampler_position);
  steps_done_ = resumed_from_ = run->step;
}

std::string Trainer::save_checkpoint() {
  HT_CHECK(checkpointer_, ErrorKind::kConfig, "save_checkpoint: no checkpoint directory was configured");
  const ckpt::RunState run{.step = steps_done_,
                           .optimizer_steps = optimizer_->step_count(),
                           .sampler_position = train_sampler_.position(),
                           .scaler = scaler_.state(),
                           .model = options_.model.str()};
  return checkpointer_->save(run, optimizer_->slots(), *optimizer_);
}

std::string Trainer::wait_for_checkpoint() { return checkpointer_ ? checkpointer_->wait() : std::string(); }

Trainer::~Trainer() = default;

std::int64_t Trainer::global_batch() const {
  return options_.micro_batch * options_.grad_accum * mesh_->layout().dp();
}

double Trainer::world_sum(double v) {
  Tensor t = Tensor::from_vector(std::vector<float>{float(v)}, {1});
  mesh_->world().all_reduce(t, t, comm::ReduceOp::kSum)->wait();
  return t.item(0);
}

StepStats Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  StepStats s;
  s.step = ++steps_done_;
  s.loss_scale = scaler_.scale();
  // Every rank draws every micro-batch, so the samplers stay in step.
  std::vector<data::Batch> batches;
  for (int micro = 0; micro < options_.grad_accum; ++micro) batches.push_back(train_sampler_.next());
  dp_->begin_step();
  // Each micro-batch's mean loss weighs 1/k (the sum equals one k-times
  // batch), times the loss scale.
  const double loss_sum = pipeline_->train_step(batches, s.loss_scale / float(options_.grad_accum),
                                                [&](bool final) { dp_->set_final_micro_batch(final); });
  dp_->finish_gradients();
  if (options_.after_gradients) options_.after_gradients(*this, s.step);
  s.grad_norm = dp_->unscale_and_norm(s.loss_scale);
  // Every rank sees the same norm, so every rank makes the same decision.
  s.skipped = scaler_.update(!std::isfinite(s.grad_norm));
  s.skipped_steps = scaler_.state().skipped_steps;
  s.lr = schedule_.lr(s.step - 1);
  if (!s.skipped) {
    optimizer_->step(s.lr, optim::clip_coefficient(s.grad_norm, options_.grad_clip));
    dp_->after_step();
  }
  // The loss is known on the last stage; one tp rank of each dp replica reports it.
  const bool reports = model_->last_stage() && mesh_->coord().tp == 0;
  s.loss = float(world_sum(reports ? loss_sum : 0.0) / double(options_.grad_accum * mesh_->layout().dp()));
  if (checkpointer_ && options_.ckpt_every > 0 && s.step % options_.ckpt_every == 0) {
    s.checkpoint_error = save_checkpoint();
    s.checkpointed = true;
  }
  s.tokens = global_batch() * options_.seq_len;
  s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return s;
}

float Trainer::evaluate() {
  std::vector<data::Batch> batches;
  for (std::int64_t i = 0; i < options_.eval_batches; ++i) batches.push_back(val_sampler_.sequential(i));
  const double sum = pipeline_->evaluate(batches);
  const bool reports = model_->last_stage() && mesh_->coord().tp == 0;
  return float(world_sum(reports ? sum : 0.0) / double(options_.eval_batches * mesh_->layout().dp()));
}

std::map<std::string, Tensor> Trainer::full_parameters() {
  return parallel::gather_full_parameters(*model_, *dp_, *mesh_);
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
