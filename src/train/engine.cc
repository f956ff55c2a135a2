// ht::train::Engine: the training step on one rank of a mesh.
#include "ht/train/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ht/comm/agreement.h"
#include "ht/comm/self_communicator.h"
#include "ht/data/sample_ranges.h"
#include "ht/nn/model_chunks.h"
#include "ht/ops/index_errors.h"
#include "ht/optim/clip.h"
#include "ht/parallel/gather_parameters.h"
#include "ht/parallel/tables.h"
#include "ht/train/job.h"
#include "ht/train/rehearsals.h"
#include "train/expert_load.h"
#include "train/policies.h"
#include "train/trace_session.h"

namespace ht::train {

namespace {

/// The program's own optimizer, else the one --optimizer names, over the rank's slots.
std::unique_ptr<optim::Optimizer> make_optimizer(const EngineOptions& o, std::vector<optim::Slot> slots) {
  if (o.make_optimizer) {
    std::unique_ptr<optim::Optimizer> own = o.make_optimizer(std::move(slots));
    HT_CHECK(own != nullptr, ErrorKind::kConfig, "EngineOptions::make_optimizer returned no optimizer");
    return own;
  }
  if (o.optimizer == "sgd") return std::make_unique<optim::SGD>(std::move(slots), o.sgd);
  return std::make_unique<optim::AdamW>(std::move(slots), o.adamw);
}

}  // namespace

void EngineOptions::validate() const {
  HT_CHECK(make_optimizer || optimizer == "adamw" || optimizer == "sgd", ErrorKind::kConfig,
           "--optimizer '{}' is not known: choose adamw or sgd", optimizer);
  HT_CHECK(steps >= 0, ErrorKind::kConfig, "--steps must be >= 0, got {}", steps);
  layout.validate();
  HT_CHECK(lr > 0.f && min_lr >= 0.f && min_lr <= lr, ErrorKind::kConfig,
           "learning rates must satisfy 0 <= min_lr ({}) <= lr ({}), lr > 0", min_lr, lr);
  HT_CHECK(warmup_steps >= 0 && eval_every >= 0 && eval_samples >= 0, ErrorKind::kConfig,
           "--warmup ({}), --eval-every ({}) and --eval-samples ({}) must be >= 0", warmup_steps, eval_every,
           eval_samples);
  HT_CHECK(ckpt_every >= 0 && ckpt_every_s >= 0, ErrorKind::kConfig,
           "--ckpt-every ({}) and --ckpt-every-s ({}) must be >= 0", ckpt_every, ckpt_every_s);
  HT_CHECK(!resume || !ckpt_dir.empty(), ErrorKind::kConfig,
           "--resume needs a checkpoint directory (--ckpt-dir, or --run-dir for <run-dir>/checkpoints)");
  HT_CHECK(recompute == nn::Recompute::kNone || recompute == nn::Recompute::kSelective ||
               recompute == nn::Recompute::kFull,
           ErrorKind::kConfig, "recompute {} is not an activation recomputation mode: choose none, selective or full",
           int(recompute));
  HT_CHECK(trace_path.empty() || (trace_first >= 1 && trace_first <= trace_last), ErrorKind::kConfig,
           "--trace-steps {}-{}: give the first and last step to trace, 1 <= first <= last (e.g. 3-5)", trace_first,
           trace_last);
}

namespace {

// The checkpointer the options ask for: disk under ckpt_dir, and memory
// snapshots when mem_ckpt_every is not 0.
std::unique_ptr<ckpt::Checkpointer> make_checkpointer(const EngineOptions& o, comm::DeviceMesh& mesh) {
  ckpt::CheckpointOptions c{.dir = o.ckpt_dir,
                            .keep = o.ckpt_keep,
                            .commit_delay = o.ckpt_commit_delay,
                            .run_dir = o.guard ? o.guard->run_dir() : std::string(),
                            .node = resilience::node_label(mesh.rank())};
  if (o.mem_ckpt_every != 0)
    c.memory_dir = o.mem_ckpt_dir.empty() ? ckpt::default_memory_dir(o.ckpt_dir) : o.mem_ckpt_dir;
  if (o.guard)
    c.superseded = [guard = o.guard] { return resilience::superseded(guard->epoch(), guard->run_dir()); };
  return std::make_unique<ckpt::Checkpointer>(c, mesh);
}

comm::DeviceMesh* mesh_or_own(comm::DeviceMesh* mesh, std::unique_ptr<comm::DeviceMesh>& own) {
  if (mesh) return mesh;
  own = std::make_unique<comm::DeviceMesh>(comm::make_self_communicator("world"), 1, 1);
  return own.get();
}

}  // namespace

Engine::Engine(const EngineOptions& options, const ModelFactory& make_model, data::DataSource& data,
               comm::DeviceMesh* mesh)
    : options_((options.validate(), options)), data_(data), mesh_(mesh_or_own(mesh, own_mesh_)) {
  const comm::MeshCoord& at = mesh_->coord();
  options_.layout = options_.layout.on_mesh(mesh_->shape());  // dp resolved
  HT_CHECK(options_.layout.ep == mesh_->ep_size(), ErrorKind::kConfig,
           "the layout {} has ep {}, but the mesh it runs on has ep {}: build the mesh from the layout (JobOptions::layout), "
           "or give the layout the mesh's ep",
           options_.layout.name(), options_.layout.ep, mesh_->ep_size());
  const parallel::Layout& layout = options_.layout;
  policies_ = std::make_unique<Policies>(options_);
  model_ = build_rank_model(make_model);
  description_ = model_->describe();
  model_->set_recompute(options_.recompute);
  if (!layout.stage_layers.empty())
    stage_split_ = layout.stage_layers;
  else if (model_->num_layers() >= layout.model_stages())
    stage_split_ = layout.layers_per_stage(model_->num_layers());
  const std::uint64_t seed = options_.seed;
  const parallel::DataParallelOptions dp_options{.zero_stage = layout.zero,
                                                 .shard_group = layout.shard_group,
                                                 .bucket_bytes = options_.bucket_bytes,
                                                 .precision = options_.precision};
  parallel::DataParallel::InitialValues initial_values = options_.initial_values;
  if (!initial_values) initial_values = [seed](const nn::Parameter& p) { return p.initial_value(seed); };
  dp_ = std::make_unique<parallel::DataParallel>(*model_, *mesh_, dp_options, std::move(initial_values));
  pipeline_ = std::make_unique<parallel::Pipeline>(*model_, mesh_->pp_group(), layout.schedule,
                                                   options_.precision.compute, options_.seed);
  optimizer_ = make_optimizer(options_, dp_->slots());
  schedule_ = {options_.lr, options_.min_lr, options_.warmup_steps, std::max<std::int64_t>(options_.steps, 1),
               options_.lr_decay};
  scaler_ = precision::LossScaler(
      options_.force_loss_scaling || options_.precision.needs_loss_scaling(), options_.loss_scaler);
  // The whole model's size: each stage's parameters counted once (tp rank 0
  // of the first replica; a routed expert by the first run of ep ranks,
  // which holds every expert once), tied copies not again.
  std::int64_t mine = 0;
  if (at.cp_rank == 0 && at.tp_rank == 0)
    for (const nn::Parameter* p : model_->parameters())
      if (!p->layout().pp_tied_copy && at.dp_rank < (p->layout().expert ? mesh_->ep_size() : 1))
        mine += shape_numel(p->full_shape());
  num_parameters_ = comm::sum_i64(mesh_->world(), mine);
  data_.attach({.dp_rank = at.dp_rank,
                .dp_size = layout.dp,
                .micro_batch = layout.micro_batch,
                .seed = options_.seed});
  expert_loads_ = ExpertLoads::of(*model_, *mesh_);  // before a resume, which restores the routing biases
  if (!options_.ckpt_dir.empty()) {
    checkpointer_ = make_checkpointer(options_, *mesh_);
    if (options_.resume) resume();
  }
  if (!options_.trace_path.empty())
    trace_ = std::make_unique<TraceSession>(options_.trace_path, options_.trace_first, options_.trace_last, *mesh_);
}

std::unique_ptr<nn::Model> Engine::build_rank_model(const ModelFactory& make_model) const {
  const parallel::Layout& layout = options_.layout;
  const comm::MeshCoord& at = mesh_->coord();
  // The model is built without storage: each flat group of the parallel
  // layer is filled from the parameters' initial values (and, under ZeRO-3,
  // sharded at once), so no rank holds the model twice, or whole under
  // ZeRO-3, and every layout starts from the same values.
  const int pp = layout.pp, v = layout.virtual_stages;
  const nn::Placement placement{
      .device = options_.device,
      .tp = nn::TensorParallel{&mesh_->tp_group()},
      .cp = nn::ContextParallel{&mesh_->cp_group()},
      .ep = nn::ExpertParallel{&mesh_->ep_group()},
      .stage = {.rank = at.pp_rank, .size = pp, .boundaries = layout.stage_boundaries()},
      .defer_storage = true};
  if (v == 1) return build_model(make_model, placement);
  // Interleaved: chunk c is virtual stage c pp + rank of pp v.
  std::vector<std::unique_ptr<nn::Model>> chunks;
  for (int c = 0; c < v; ++c) {
    nn::Placement chunk = placement;
    chunk.stage.rank = c * pp + at.pp_rank;
    chunk.stage.size = pp * v;
    try {
      chunks.push_back(build_model(make_model, chunk));
    } catch (const Error& e) {
      // The model's own checks of its stage (parallel::validate_boundaries
      // on --stage-layers among them) see pp v stages, not that they are
      // virtual: say so, or a user reads "pipeline stages" and --pp.
      if (e.kind() != ErrorKind::kConfig) throw;
      throw Error(ErrorKind::kConfig,
                  fmt::format("{} (under --schedule interleaved the model is split into {} virtual stages, --pp {} x "
                              "--virtual-stages {}: the stages above are virtual stages, and --stage-layers takes one "
                              "layer count per virtual stage)",
                              e.message(), pp * v, pp, v));
    }
  }
  nn::Placement rank = placement;
  rank.stage.boundaries.clear();  // those of the virtual stages are the chunks'
  return std::make_unique<nn::ModelChunks>(rank, std::move(chunks));
}

std::unique_ptr<nn::Model> Engine::build_model(const ModelFactory& make_model, const nn::Placement& placement) const {
  std::unique_ptr<nn::Model> model = make_model(placement);
  HT_CHECK(model != nullptr, ErrorKind::kInvalidArgument, "the model factory returned no model");
  const nn::PipelineStage& want = placement.stage;
  HT_CHECK(model->stage().rank == want.rank && model->stage().size == want.size &&
               model->tensor_parallel().size() == placement.tp.size() && model->device() == placement.device,
           ErrorKind::kInvalidArgument,
           "the model factory built '{}' for stage {} of {}, tp {}, device {}; the engine asked for stage {} of {}, "
           "tp {}, device {}: build the model with the placement it is given",
           model->describe(), model->stage().rank, model->stage().size, model->tensor_parallel().size(),
           model->device().str(), want.rank, want.size, placement.tp.size(), placement.device.str());
  HT_CHECK(placement.cp.size() == 1 || model->supports_context_parallel(), ErrorKind::kNotSupported,
           "model '{}' does not run under context parallelism (--cp {}): its positions and attention would see "
           "only this rank's part of each sequence. Train it with --cp 1, or make it give positions their global "
           "index and attend across the group (nn/context_parallel.h) and return true from "
           "supports_context_parallel()",
           model->describe(), placement.cp.size());
  HT_CHECK(model->context_parallel().size() == placement.cp.size(), ErrorKind::kInvalidArgument,
           "the model factory built '{}' for context parallelism over {} ranks; the engine asked for {}: build the "
           "model with the placement it is given",
           model->describe(), model->context_parallel().size(), placement.cp.size());
  HT_CHECK(model->stage().boundaries == want.boundaries, ErrorKind::kInvalidArgument,
           "the model factory built '{}' with pipeline stage boundaries {{{}}}; the engine asked for {{{}}} "
           "(--stage-layers): build the model with the placement it is given",
           model->describe(), fmt::join(model->stage().boundaries, ","), fmt::join(want.boundaries, ","));
  return model;
}

Engine::Engine(Job& job, EngineOptions options, const ModelFactory& make_model, data::DataSource& data)
    : Engine((options.guard = &job.guard(), options), make_model, data, &job.mesh()) {
  add_fault_rehearsals(*this, job.faults(), job.options().run_dir);
}

Engine::~Engine() = default;  // TraceSession and ExpertLoads are complete here

double ExpertLoad::max_over_mean() const {
  if (tokens.empty()) return 0;
  double sum = 0, most = 0;
  for (std::int64_t t : tokens) {
    sum += double(t);
    most = std::max(most, double(t));
  }
  return sum > 0 ? most * double(tokens.size()) / sum : 0;
}

void Engine::resume() {
  const std::optional<ckpt::RunState> run =
      checkpointer_->load_latest(description_, optimizer_->slots(), *optimizer_);
  if (!run) return;
  // The data position: samples for a random-access source, which then reads
  // on in any layout; a stream's own position, only in the share it was
  // drawn in (another share would read other rows than the run would have).
  const std::string shard = stream_shard();
  HT_CHECK(run->consumed_samples >= 0, ErrorKind::kConfig,
           "the checkpoint of step {} in '{}' records no consumed samples (an older hypertrain wrote it): its data "
           "position cannot be carried; start the run afresh or resume it with the version that wrote it",
           run->step, options_.ckpt_dir);
  HT_CHECK(shard.empty() || shard == run->stream_shard, ErrorKind::kConfig,
           "the data source is a stream (random_access() false): the checkpoint of step {} read it as {}, and this "
           "run would read it as {}, so it would train on other rows than the saved run would have. Resume with the "
           "same data-parallel size and --micro-batch, or make the source random access (data::DataSource::samples)",
           run->step, run->stream_shard.empty() ? std::string("a random-access source") : run->stream_shard,
           shard.empty() ? std::string("a random-access source") : shard);
  dp_->after_step();  // the working copies follow the loaded master values
  optimizer_->set_step_count(run->optimizer_steps);
  scaler_.set_state(run->scaler);
  consumed_samples_ = run->consumed_samples;
  if (!shard.empty()) data_.restore(run->data);
  client_state_ = run->client;
  if (expert_loads_) expert_loads_->restore(client_state_);
  steps_done_ = resumed_from_ = run->step;
  policies_->snapshots.resumed(run->step);
}

std::string Engine::save_checkpoint() {
  HT_CHECK(checkpointer_, ErrorKind::kConfig, "save_checkpoint: no checkpoint directory was configured");
  // Never a suspect state: not while the loss is non-finite (a state that
  // may be diverging is not worth resuming from), and not unchecked when
  // replicas are compared (a bit flipped since the last comparison would
  // live on in every resumed run).
  if (policies_->divergence.suspect())
    return fmt::format("checkpoint of step {} not saved: the loss is non-finite ({} steps in a row)", steps_done_,
                       policies_->divergence.nonfinite_run());
  // The check is part of the save: it reports the save's phase, so a rank
  // held in it sorts with the save, after the step's loss reduction.
  if (policies_->replicas.before_save(steps_done_)) check_replicas(steps_done_, resilience::Phase::kCheckpoint);
  policies_->checkpoints.saved();
  if (expert_loads_) expert_loads_->save(client_state_);
  return checkpointer_->save(run_state(), optimizer_->slots(), *optimizer_);
}

ckpt::RunState Engine::run_state() const {
  const bool stream = !data_.random_access();
  return {.step = steps_done_,
          .optimizer_steps = optimizer_->step_count(),
          .scaler = scaler_.state(),
          .model = description_,
          .optimizer = optimizer_->name(),
          .layout = options_.layout.name(),
          .consumed_samples = consumed_samples_,
          .data = stream ? data_.state() : ClientState{},
          .stream_shard = stream_shard(),
          .client = client_state_};
}

std::string Engine::checkpoint_now() {
  HT_CHECK(checkpointer_, ErrorKind::kConfig, "checkpoint_now: no checkpoint directory was configured");
  std::string error;
  const std::int64_t step = steps_done_;
  if (step > checkpointer_->last_save().step && step > resumed_from_) error = save_checkpoint();
  return error.empty() ? wait_for_checkpoint() : error;
}

std::string Engine::wait_for_checkpoint() { return checkpointer_ ? checkpointer_->wait() : std::string(); }

std::int64_t Engine::global_batch() const {
  return options_.layout.global_batch();
}

std::vector<float> Engine::world_sum(std::vector<float> v) {
  Tensor t = Tensor::from_vector(v, {std::int64_t(v.size())});
  mesh_->world().all_reduce(t, t, comm::ReduceOp::kSum)->wait();
  return t.to_vector<float>();
}

void Engine::progress(resilience::Phase phase) {
  if (options_.guard) options_.guard->progress(steps_done_, phase);
  if (trace_) trace_->phase(resilience::phase_name(phase));
}

void Engine::check_replicas(std::int64_t step, resilience::Phase phase) {
  progress(phase);
  policies_->replicas.check(*model_, *mesh_, options_.layout.zero == 3, step);
}

std::string Engine::stream_shard() const {
  if (data_.random_access()) return "";
  return fmt::format("dp {} x micro-batch {}", mesh_->shape().dp_size(), options_.layout.micro_batch);
}

void Engine::check_drawn(const data::MicroBatch& b, std::int64_t rows, const char* what, std::int64_t first) const {
  auto rows_of = [](const Tensor& t) { return t.defined() && t.ndim() > 0 ? t.size(0) : std::int64_t(-1); };
  HT_CHECK(rows_of(b.input) == rows && rows_of(b.target) == rows, ErrorKind::kInvalidArgument,
           "the data source gave {} with {} input rows and {} target rows for samples [{}, {}): it must give {} rows "
           "(one per sample, along dimension 0)",
           what, rows_of(b.input), rows_of(b.target), first, first + rows, rows);
  for (const auto& [name, t] : b.side)
    HT_CHECK(rows_of(t) == rows, ErrorKind::kInvalidArgument,
             "the data source gave {} whose side input '{}' has {} rows for samples [{}, {}): side inputs have a row "
             "per sample along dimension 0 ({} here)",
             what, name, rows_of(t), first, first + rows, rows);
  model_->check_batch(b.input, b.target);
}

void Engine::take_context_chunks(data::MicroBatch& b) const {
  const nn::ContextParallel& cp = model_->context_parallel();
  if (cp.size() == 1) return;
  HT_CHECK(b.side.empty(), ErrorKind::kNotSupported,
           "--cp {}: the data source gives side inputs ('{}'), which context parallelism does not split; padding "
           "masks do not cross the sequence's split. Train with --cp 1",
           cp.size(), b.side.begin()->first);
  HT_CHECK(b.input.ndim() >= 2 && b.target.ndim() >= 2 && b.input.size(1) == b.target.size(1),
           ErrorKind::kShapeMismatch,
           "--cp {} splits the input and the target along dimension 1 (the sequence), which must be the same length; "
           "got an input {} and a target {}",
           cp.size(), shape_str(b.input.shape()), shape_str(b.target.shape()));
  b.input = nn::context_chunks(b.input, cp);
  b.target = nn::context_chunks(b.target, cp);
}

std::vector<data::MicroBatch> Engine::draw_training() {
  const comm::MeshShape& shape = mesh_->shape();
  const std::int64_t rows = options_.layout.micro_batch;
  std::vector<data::MicroBatch> batches;
  for (int j = 0; j < options_.layout.grad_accum; ++j) {
    const data::SampleRange r =
        data::training_range(consumed_samples_, j, mesh_->coord().dp_rank, shape.dp_size(), rows);
    data::MicroBatch b = data_.random_access() ? data_.samples(r.first, r.count) : data_.next();
    b.first_sample = r.first;
    check_drawn(b, rows, "a training micro-batch", r.first);
    take_context_chunks(b);
    batches.push_back(std::move(b));
  }
  return batches;
}

std::vector<data::MicroBatch> Engine::draw_validation() {
  std::vector<data::MicroBatch> batches;
  for (const data::SampleRange& r : data::validation_ranges(options_.eval_samples, mesh_->coord().dp_rank,
                                                           mesh_->shape().dp_size(), options_.layout.micro_batch)) {
    data::MicroBatch b = data_.validation_samples(r.first, r.count);
    b.first_sample = r.first;
    check_drawn(b, r.count, "a validation micro-batch", r.first);
    take_context_chunks(b);
    batches.push_back(std::move(b));
  }
  return batches;
}

StepStats Engine::step() {
  const auto start = std::chrono::steady_clock::now();
  StepStats s;
  s.step = ++steps_done_;
  s.loss_scale = scaler_.scale();
  if (trace_) trace_->begin_step(s.step);
  const std::vector<data::MicroBatch> batches = draw_step(s);
  const parallel::LossSums my_loss = forward_backward(s, batches, start);
  const double loss_count = apply_update(s, my_loss);
  if (policies_->replicas.due(s.step)) check_replicas(s.step);
  const StepVotes votes = agree_on_step(s, float(my_loss.sum), loss_count);
  if (expert_loads_) s.experts = expert_loads_->take(options_.layout.grad_accum, !s.skipped);
  save_if_due(s, votes);
  policies_->stragglers.end_of_step(mesh_->world(), s);
  progress(resilience::Phase::kStepDone);
  if (trace_) trace_->end_step(s.step, s.step >= options_.steps);
  std::int64_t targets = 0;
  for (const data::MicroBatch& b : batches) targets += b.target.numel();
  s.tokens = targets * mesh_->shape().size(comm::MeshAxis::kDpCp);  // each cp rank its share of the positions
  if (!batches.empty()) s.flops_per_token = model_->flops_per_token(batches.front().input.shape());
  s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // What auto snapshots measure their cost by: the step's time, less a
  // disk save's stall (not theirs to pay).
  policies_->snapshots.step_time(s.step, s.ms - (s.checkpointed ? checkpointer_->last_save().stall_ms : 0.0),
                                 votes.snapshot_busy);
  for (const StepHooks& h : hooks_)
    if (h.after_step) h.after_step(s);
  return s;
}

std::vector<data::MicroBatch> Engine::draw_step(const StepStats& s) {
  progress(resilience::Phase::kData);
  for (const StepHooks& h : hooks_)
    if (h.before_step) h.before_step(s.step);
  // Every rank draws every micro-batch, so the data sources stay in step.
  std::vector<data::MicroBatch> batches = draw_training();
  consumed_samples_ += global_batch();
  return batches;
}

parallel::LossSums Engine::forward_backward(const StepStats& s, const std::vector<data::MicroBatch>& batches,
                                            std::chrono::steady_clock::time_point start) {
  dp_->begin_step();
  // Each micro-batch's mean loss weighs 1/k (the sum equals one k-times
  // batch), times the loss scale; a token-normalised sum is corrected once
  // the step's count is known (apply_update).
  progress(resilience::Phase::kForwardBackward);
  // Only this step's forwards count against the parameters' uses (a
  // program's own forward between steps does not).
  for (nn::Parameter* p : model_->parameters()) (void)p->take_forwards();
  // A backward that completes the model's gradients (or, interleaved, one
  // chunk's) lets data parallelism start reducing them.
  const parallel::LossSums sums =
      pipeline_->train_step(batches, s.loss_scale / float(options_.layout.grad_accum), [&](nn::Model* completes) {
        if (completes) dp_->set_final_part(*completes);
      });
  check_parameter_uses();
  // The rank's own work this step (slow ranks show here; waiting for peers
  // mostly comes later, in the reduction).
  policies_->stragglers.add_work(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  progress(resilience::Phase::kGradientReduction);
  dp_->finish_gradients();
  // The loss is known on the last stage; one tp rank of each dp replica reports it.
  const bool reports = model_->last_stage() && mesh_->coord().tp_rank == 0;
  float my_loss = reports ? float(sums.sum) : 0.f;
  for (const StepHooks& h : hooks_)
    if (h.after_gradients) h.after_gradients(s.step, my_loss);
  return {.sum = my_loss,
          .count = reports ? sums.count : 0.0,
          .summed = model_->last_stage() && sums.summed,
          .aux_loss_grads = sums.aux_loss_grads};
}

void Engine::check_parameter_uses() {
  // Each micro-batch's backward marks a parameter ready once per call of its
  // module; the gradient is complete (and data parallelism reduces it)
  // after uses() marks. A module called more often than that in one forward
  // would have its gradient reduced before its last call's contribution.
  const std::int64_t k = std::max<std::int64_t>(options_.layout.grad_accum, 1);
  for (nn::Parameter* p : model_->parameters()) {
    const std::int64_t forwards = p->take_forwards();
    HT_CHECK(forwards <= k * p->uses(), ErrorKind::kNotSupported,
             "parameter '{}' is read by {} forwards of its module per micro-batch, but one gradient counts {} "
             "contribution(s) (Parameter::uses): its gradient would be reduced before the last of them. A module "
             "called several times in one forward shares its weights: call set_uses({}) on its parameters, or give "
             "each call a module of its own",
             p->name(), forwards / k, p->uses(), forwards / k);
  }
}

double Engine::apply_update(StepStats& s, const parallel::LossSums& my_loss) {
  progress(resilience::Phase::kOptimizer);
  // A token id a CUDA op skipped stops the step before its gradients are
  // applied (ops/index_errors.h); nothing to read on the CPU.
  ops::raise_index_errors(options_.device);
  // The norm of the unscaled gradients over the mesh, each element once
  // (shards, tp parts, stages; tied copies and replicas once: the slots'
  // primary pieces), non-finite on every rank when any rank holds an Inf or NaN.
  std::vector<Tensor> counted;
  for (const optim::Slot& slot : dp_->slots())
    if (slot.primary) counted.push_back(slot.grad);
  // The step's loss count rides in the norm's one all-reduce: k dp for mean
  // losses (k per reporting rank), whatever a token-normalised loss counted;
  // with it, whether the loss is a sum and whether a layer added an
  // auxiliary loss's gradient, which are known on different stages.
  comm::Communicator& world = mesh_->world();
  double loss_count = 0;
  bool summed_with_aux = false;
  const auto sum_over_world = [&](Tensor& sum) {
    Tensor all = Tensor::empty({4}, DType::kF32, sum.device(), MemCategory::kOther);
    Tensor norm_part = all.slice(0, 1), rest = all.slice(1, 4);
    norm_part.copy_from(sum);
    rest.copy_from(Tensor::from_vector(std::vector<float>{float(my_loss.count), my_loss.summed ? 1.f : 0.f,
                                                          my_loss.aux_loss_grads ? 1.f : 0.f},
                                       {3})
                       .to(sum.device()));
    world.all_reduce(all, all, comm::ReduceOp::kSum)->wait();
    sum.copy_from(norm_part);
    const std::vector<float> r = rest.to(Device::cpu()).to_vector<float>();
    loss_count = r[0];
    summed_with_aux = r[1] > 0 && r[2] > 0;
  };
  const float raw_norm = optim::unscale_and_global_norm(dp_->shard_gradients(), counted, s.loss_scale,
                                                        options_.device, sum_over_world);
  HT_CHECK(!summed_with_aux, ErrorKind::kNotSupported,
           "the model's loss is a token-normalised sum, and a layer added an auxiliary loss's gradient (nn::MoE's "
           "load-balancing or z-loss): the step divides every gradient by its token count, which would scale the "
           "auxiliary ones too. Give the model a mean loss, or the layer's auxiliary coefficients 0");
  // The backward gave each micro-batch's loss 1/k of the step (data
  // parallelism averages over dp x cp): right for means, whose count is k dp
  // cp (each cp rank's mean is over an equal share of the positions); a
  // token-normalised step's gradient is its sum over its own count.
  const double k_dp = double(options_.layout.grad_accum * mesh_->shape().size(comm::MeshAxis::kDpCp));
  const float normalise = loss_count > 0 ? float(k_dp / loss_count) : 0.f;
  s.grad_norm = raw_norm * normalise;
  // Every rank sees the same norm, so every rank makes the same decision: an
  // overflow under loss scaling is skipped; without scaling a non-finite
  // gradient cannot be applied either.
  const bool finite = std::isfinite(raw_norm);
  s.skipped = scaler_.enabled() ? scaler_.update(!finite) : !finite;
  // A token-normalised step that counted nothing has no gradient to apply.
  if (loss_count <= 0) s.skipped = true;
  s.skipped_steps = scaler_.state().skipped_steps;
  s.lr = options_.lr_schedule ? options_.lr_schedule(s.step - 1) : schedule_.lr(s.step - 1);
  HT_CHECK(std::isfinite(s.lr) && s.lr >= 0.f, ErrorKind::kConfig,
           "the learning-rate schedule gave {} for step {}: it must be finite and >= 0", s.lr, s.step);
  if (s.skipped) return loss_count;
  optimizer_->step(s.lr, normalise * optim::clip_coefficient(s.grad_norm, options_.grad_clip));
  dp_->after_step();
  for (const StepHooks& h : hooks_)
    if (h.after_update) h.after_update(s.step);
  return loss_count;
}

Engine::StepVotes Engine::agree_on_step(StepStats& s, float my_loss, double loss_count) {
  // One world all-reduce carries the loss and every rank's vote: whether it
  // was asked to stop, and rank 0's clock on checkpoints and snapshots.
  progress(resilience::Phase::kLossReduction);
  const bool stop_here = options_.guard && options_.guard->preempt_requested();
  const bool snapshot_busy = checkpointer_ && checkpointer_->snapshot_busy();
  // Rank 0's clock and count decide the cadences.
  const bool rank0 = mesh_->rank() == 0;
  const bool checkpoint_by_time = checkpointer_ && rank0 && policies_->checkpoints.due_by_time();
  const bool snapshot_due = checkpointer_ && checkpointer_->has_memory_tier() && rank0 &&
                            policies_->snapshots.due(s.step);
  const auto vote = [](bool yes) { return yes ? 1.f : 0.f; };
  const std::vector<float> sums = world_sum({my_loss, vote(stop_here), vote(checkpoint_by_time), vote(snapshot_due),
                                             vote(snapshot_busy)});
  const StepVotes votes{.stop = sums[1] > 0.f, .checkpoint_by_time = sums[2] > 0.f, .snapshot_due = sums[3] > 0.f,
                        .snapshot_busy = sums[4] > 0.f};
  // k dp for means (exactly today's mean of means); NaN for a sum over nothing.
  s.loss = float(double(sums[0]) / loss_count);
  s.stop_requested = votes.stop;
  policies_->divergence.observe(s.loss, s.step);
  return votes;
}

void Engine::save_if_due(StepStats& s, const StepVotes& votes) {
  // Not while the loss is non-finite: a state that may be diverging is not
  // worth resuming from. The save waits for the next finite step.
  const bool suspect = policies_->divergence.suspect();
  if (checkpointer_ && policies_->checkpoints.save_now(s.step, votes.checkpoint_by_time, suspect)) {
    progress(resilience::Phase::kCheckpoint);
    s.checkpoint_error = save_checkpoint();
    s.checkpointed = true;
    for (const StepHooks& h : hooks_)
      if (h.after_checkpoint) h.after_checkpoint(s.step);
  }
  // A memory snapshot when rank 0 says it is due and no rank is still
  // writing the last one (never a wait in the step); not of a suspect state.
  if (!votes.snapshot_due || votes.snapshot_busy || suspect) return;
  // As before a save: a bit flipped since the last comparison would be
  // resumed from after every failure.
  if (policies_->replicas.before_save(steps_done_)) check_replicas(steps_done_, resilience::Phase::kSnapshot);
  progress(resilience::Phase::kSnapshot);
  if (expert_loads_) expert_loads_->save(client_state_);
  s.snapshot_error = checkpointer_->snapshot(run_state(), optimizer_->slots(), *optimizer_);
  s.snapshotted = true;
  // The fields the snapshot's thread never writes.
  const ckpt::SnapshotStats& began = checkpointer_->last_snapshot();
  policies_->snapshots.taken(s.step, began.stall_ms, began.fresh_image);
}

EvalStats Engine::evaluate() {
  HT_CHECK(options_.eval_samples > 0 && data_.has_validation(), ErrorKind::kConfig,
           "evaluate: {}; give the data source a validation split or turn validation off",
           options_.eval_samples > 0 ? "the data source has no validation data" : "--eval-samples is 0");
  const std::vector<data::MicroBatch> batches = draw_validation();
  const parallel::Evaluation e = pipeline_->evaluate(batches);
  ops::raise_index_errors(options_.device);
  // One world sum carries the loss and the metrics, in the model's order
  // (the same on every rank); one rank of each replica's last stage reports.
  const bool reports = model_->last_stage() && mesh_->coord().tp_rank == 0;
  const std::vector<std::string> names = model_->metric_names();
  std::vector<float> mine{reports ? float(e.loss.sum) : 0.f, reports ? float(e.loss.count) : 0.f};
  for (const auto& [name, sum] : e.metric_sums)
    HT_CHECK(std::find(names.begin(), names.end(), name) != names.end(), ErrorKind::kInvalidArgument,
             "model '{}' added the metric '{}' that its metric_names() does not list ({}): list every metric there",
             description_, name, fmt::join(names, ", "));
  for (const std::string& name : names) {
    const auto it = e.metric_sums.find(name);
    const bool has = reports && it != e.metric_sums.end();
    mine.push_back(has ? float(it->second.sum) : 0.f);
    mine.push_back(has ? float(it->second.count) : 0.f);
  }
  const std::vector<float> sums = world_sum(std::move(mine));
  // Each a sum over its count: samples for means and per-sample metrics.
  const auto ratio = [](float sum, float count) { return count > 0.f ? double(sum) / double(count) : 0.0; };
  EvalStats stats;
  stats.loss = ratio(sums[0], sums[1]);
  stats.samples = options_.eval_samples;
  for (std::size_t i = 0; i < names.size(); ++i) stats.metrics[names[i]] = ratio(sums[2 * i + 2], sums[2 * i + 3]);
  return stats;
}

std::map<std::string, Tensor> Engine::full_parameters() {
  return parallel::gather_full_parameters(*model_, *dp_, *mesh_);
}

}  // namespace ht::train
