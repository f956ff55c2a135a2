// ht::train::Trainer: the training loop on one rank of a mesh.
#include "ht/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

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
  HT_CHECK(ckpt_every >= 0 && ckpt_every_s >= 0, ErrorKind::kConfig,
           "--ckpt-every ({}) and --ckpt-every-s ({}) must be >= 0", ckpt_every, ckpt_every_s);
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
  // Under ZeRO-3 no rank holds the whole model at any time: the parameters'
  // storage is released as each module is built, and each flat group is
  // filled with its initial values only to be sharded at once.
  const bool sharded_init = options_.data_parallel.zero_stage == 3;
  model_ = std::make_unique<nn::GPT>(options_.model, options_.device, nn::TensorParallel{&mesh_->tp()},
                                     nn::PipelineStage{mesh_->coord().pp, layout.pp()}, sharded_init);
  parallel::DataParallel::InitialValues initial_values;
  if (sharded_init)
    initial_values = [this](const nn::Parameter& p) { return model_->initial_value(p, options_.seed); };
  else
    model_->init_weights(options_.seed);
  dp_ = std::make_unique<parallel::DataParallel>(*model_, *mesh_, options_.data_parallel, std::move(initial_values));
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
  // Never a suspect state: not while the loss is non-finite (a state that
  // may be diverging is not worth resuming from), and not unchecked when
  // replicas are compared (a bit flipped since the last comparison would
  // live on in every resumed run).
  if (nonfinite_run_ > 0)
    return fmt::format("checkpoint of step {} not saved: the loss is non-finite ({} steps in a row)", steps_done_,
                       nonfinite_run_);
  if (options_.sdc_every > 0 && replicas_checked_step_ != steps_done_) {
    progress("replica-check");
    check_replicas(steps_done_);
  }
  const ckpt::RunState run{.step = steps_done_,
                           .optimizer_steps = optimizer_->step_count(),
                           .sampler_position = train_sampler_.position(),
                           .scaler = scaler_.state(),
                           .model = options_.model.str()};
  last_checkpoint_time_ = std::chrono::steady_clock::now();
  return checkpointer_->save(run, optimizer_->slots(), *optimizer_);
}

std::string Trainer::wait_for_checkpoint() { return checkpointer_ ? checkpointer_->wait() : std::string(); }

Trainer::~Trainer() = default;

std::int64_t Trainer::global_batch() const {
  return options_.micro_batch * options_.grad_accum * mesh_->layout().dp();
}

std::vector<float> Trainer::world_sum(std::vector<float> v) {
  Tensor t = Tensor::from_vector(v, {std::int64_t(v.size())});
  mesh_->world().all_reduce(t, t, comm::ReduceOp::kSum)->wait();
  return t.to_vector<float>();
}

void Trainer::progress(const char* phase) {
  if (options_.guard) options_.guard->progress(steps_done_, phase);
}

static std::string run_dir_of(const TrainerOptions& o) { return o.guard ? o.guard->run_dir() : std::string(); }

void Trainer::inject_step_faults(std::int64_t step) {
  const int rank = mesh_->rank();
  const auto& plan = options_.faults;
  if (plan.empty()) return;
  if (auto f = plan.find(resilience::FaultKind::kCrash, rank, step))
    resilience::rehearse_crash(run_dir_of(options_), *f, rank);
  if (auto f = plan.find(resilience::FaultKind::kHang, rank, step))
    resilience::rehearse_hang(run_dir_of(options_), *f, rank);
  if (auto f = plan.find(resilience::FaultKind::kSlow, rank, step)) {
    // factor x the step's own work: the injected delay of the last step is not part of it.
    injected_ms_ = (f->factor - 1.0) * last_step_ms_;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(injected_ms_));
  }
}

void Trainer::check_replicas(std::int64_t step) {
  replicas_checked_step_ = step;
  // Replicas (the same tp rank and stage in every dp group) hold identical
  // parameters after the update; one 64-bit checksum each is compared.
  if (mesh_->layout().dp() < 2 || options_.data_parallel.zero_stage == 3) return;
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (nn::Parameter* p : model_->parameters()) {
    const Tensor host = p->data().to(Device::cpu());
    h = (h ^ ckpt::checksum64(host.data_ptr(), host.nbytes())) * 0x100000001b3ull;
  }
  const std::vector<std::int32_t> mine{std::int32_t(h & 0xffffffffu), std::int32_t(h >> 32)};
  comm::Communicator& dp = mesh_->dp();
  Tensor all = Tensor::empty({2 * dp.size()}, DType::kI32);
  dp.all_gather(Tensor::from_vector(mine, {2}), all)->wait();
  const std::vector<std::int32_t> v = all.to_vector<std::int32_t>();
  std::vector<int> agree(std::size_t(dp.size()), 0);
  for (int a = 0; a < dp.size(); ++a)
    for (int b = 0; b < dp.size(); ++b)
      if (v[std::size_t(2 * a)] == v[std::size_t(2 * b)] && v[std::size_t(2 * a + 1)] == v[std::size_t(2 * b + 1)])
        ++agree[std::size_t(a)];
  const int most = *std::max_element(agree.begin(), agree.end());
  if (most == dp.size()) return;  // every replica agrees with every other
  // The odd ones out; with no majority (two replicas) every rank is suspect.
  const std::vector<int> ranks = mesh_->group(comm::MeshAxis::kDp);
  std::vector<int> culprits;
  for (int a = 0; a < dp.size(); ++a)
    if (agree[std::size_t(a)] < most || most * 2 <= dp.size()) culprits.push_back(ranks[std::size_t(a)]);
  HT_CHECK(false, ErrorKind::kCorruption,
           "silent data corruption after step {}: the parameters of world rank(s) {} differ from their data-parallel "
           "replicas' (group {}); treat their node(s) as faulty",
           step, fmt::join(culprits, ","), dp.name());
}

void Trainer::check_stragglers(StepStats& s) {
  comm::Communicator& world = mesh_->world();
  const float mine = float(window_work_ms_ / double(options_.straggler_window));
  window_work_ms_ = 0;
  Tensor all = Tensor::empty({world.size()}, DType::kF32);
  world.all_gather(Tensor::from_vector(std::vector<float>{mine}, {1}), all)->wait();
  std::vector<float> v = all.to_vector<float>(), sorted = v;
  std::sort(sorted.begin(), sorted.end());
  const float median = sorted[(sorted.size() - 1) / 2];  // the lower median: with two ranks, the faster
  slow_windows_.resize(v.size(), 0);
  std::vector<std::string> report;
  for (std::size_t r = 0; r < v.size(); ++r) {
    slow_windows_[r] = v[r] > float(options_.straggler_threshold) * median ? slow_windows_[r] + 1 : 0;
    if (slow_windows_[r] >= options_.straggler_windows) {
      report.push_back(fmt::format("rank {} ({:.1f} ms/step, {:.2f}x the median, {} windows)", r, v[r],
                                   median > 0 ? v[r] / median : 0.f, slow_windows_[r]));
      s.straggler_ranks.push_back(int(r));
    }
  }
  s.stragglers = fmt::format("{}", fmt::join(report, "; "));
}

bool Trainer::checkpoint_due_by_time() const {
  return checkpointer_ && options_.ckpt_every_s > 0 && mesh_->rank() == 0 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint_time_).count() >=
             options_.ckpt_every_s;
}


StepStats Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  StepStats s;
  s.step = ++steps_done_;
  s.loss_scale = scaler_.scale();
  progress("data");
  inject_step_faults(s.step);
  // Every rank draws every micro-batch, so the samplers stay in step.
  std::vector<data::Batch> batches;
  for (int micro = 0; micro < options_.grad_accum; ++micro) batches.push_back(train_sampler_.next());
  dp_->begin_step();
  // Each micro-batch's mean loss weighs 1/k (the sum equals one k-times
  // batch), times the loss scale.
  progress("forward-backward");
  const double loss_sum = pipeline_->train_step(batches, s.loss_scale / float(options_.grad_accum),
                                                [&](bool final) { dp_->set_final_micro_batch(final); });
  // The rank's own work this step (slow ranks show here; waiting for peers
  // mostly comes later, in the reduction).
  window_work_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  progress("gradient-reduction");
  dp_->finish_gradients();
  if (options_.after_gradients) options_.after_gradients(*this, s.step);
  const auto nan_fault = options_.faults.find(resilience::FaultKind::kNan, mesh_->rank(), s.step);
  if (nan_fault) {
    if (nan_fault->step == s.step || nan_fault->step < 0) resilience::record_fired(run_dir_of(options_), *nan_fault);
    if (!optimizer_->slots().empty()) {
      Tensor g = optimizer_->slots().front().grad;
      g.fill_(NAN);
    }
  }
  progress("optimizer");
  s.grad_norm = dp_->unscale_and_norm(s.loss_scale);
  // Every rank sees the same norm, so every rank makes the same decision: an
  // overflow under loss scaling is skipped; without scaling a non-finite
  // gradient cannot be applied either.
  const bool finite = std::isfinite(s.grad_norm);
  s.skipped = scaler_.enabled() ? scaler_.update(!finite) : !finite;
  s.skipped_steps = scaler_.state().skipped_steps;
  s.lr = schedule_.lr(s.step - 1);
  if (!s.skipped) {
    optimizer_->step(s.lr, optim::clip_coefficient(s.grad_norm, options_.grad_clip));
    dp_->after_step();
  }
  if (auto f = options_.faults.find(resilience::FaultKind::kBitflip, mesh_->rank(), s.step)) {
    nn::Parameter& first = *model_->parameters().front();
    resilience::rehearse_bitflip(run_dir_of(options_), *f, mesh_->rank(), first.data(), first.name());
  }
  if (options_.sdc_every > 0 && s.step % options_.sdc_every == 0) {
    progress("replica-check");
    check_replicas(s.step);
  }
  // The loss is known on the last stage; one tp rank of each dp replica reports it.
  const bool reports = model_->last_stage() && mesh_->coord().tp == 0;
  // One world all-reduce carries the loss, whether any rank was asked to
  // stop and whether rank 0's clock says a checkpoint is due.
  const bool stop_here = options_.guard && options_.guard->preempt_requested();
  // A rehearsed NaN travels in the sum, so every rank sees the same loss.
  const float my_loss = nan_fault ? NAN : reports ? float(loss_sum) : 0.f;
  const std::vector<float> sums =
      world_sum({my_loss, stop_here ? 1.f : 0.f, checkpoint_due_by_time() ? 1.f : 0.f});
  s.loss = float(double(sums[0]) / double(options_.grad_accum * mesh_->layout().dp()));
  s.stop_requested = sums[1] > 0.f;
  checkpoint_deferred_ = checkpointer_ && (checkpoint_deferred_ || sums[2] > 0.f ||
                                           (options_.ckpt_every > 0 && s.step % options_.ckpt_every == 0));
  // Divergence: the loss non-finite for too many steps in a row (an overflow
  // that loss scaling handles does not count: its loss is finite).
  nonfinite_run_ = std::isfinite(s.loss) ? 0 : nonfinite_run_ + 1;
  HT_CHECK(nonfinite_run_ < options_.divergence_steps, ErrorKind::kDivergence,
           "the loss has been non-finite for {} steps in a row (step {}): training diverged; resume from an earlier "
           "checkpoint with a lower learning rate",
           nonfinite_run_, s.step);
  // Not while the loss is non-finite: a state that may be diverging is not
  // worth resuming from. The save waits for the next finite step.
  if (checkpoint_deferred_ && nonfinite_run_ == 0) {
    checkpoint_deferred_ = false;
    progress("checkpoint");
    s.checkpoint_error = save_checkpoint();
    s.checkpointed = true;
    if (auto f = options_.faults.find(resilience::FaultKind::kCkptCorrupt, mesh_->rank(), s.step);
        f && f->step == s.step) {
      wait_for_checkpoint();  // damage it once it is committed
      if (mesh_->rank() == 0)
        resilience::rehearse_file_damage(
            run_dir_of(options_), *f,
            (std::filesystem::path(ckpt::checkpoint_dir(options_.ckpt_dir, s.step)) / ckpt::rank_file_name(0)).string());
    }
  }
  if (options_.straggler_window > 0 && s.step % options_.straggler_window == 0) check_stragglers(s);
  progress("step-done");
  s.tokens = global_batch() * options_.seq_len;
  s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  last_step_ms_ = s.ms - injected_ms_;
  injected_ms_ = 0;
  return s;
}

float Trainer::evaluate() {
  std::vector<data::Batch> batches;
  for (std::int64_t i = 0; i < options_.eval_batches; ++i) batches.push_back(val_sampler_.sequential(i));
  const double sum = pipeline_->evaluate(batches);
  const bool reports = model_->last_stage() && mesh_->coord().tp == 0;
  return float(double(world_sum({reports ? float(sum) : 0.f})[0]) /
               double(options_.eval_batches * mesh_->layout().dp()));
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
