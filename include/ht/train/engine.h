// ht::train::Engine: trains any nn::Model on one rank of a pp x dp x tp mesh
// (a mesh of one process by default) — micro-batches from the program's
// DataSource with gradient accumulation through the pipeline schedule, data
// parallelism or ZeRO, mixed precision with dynamic loss scaling,
// global-norm clipping, AdamW with warm-up + cosine schedule, validation,
// asynchronous checkpoints that carry the program's own state, resume, and
// what a rank does for the supervisor: progress reports (heartbeats), replica
// checks against silent data corruption, straggler detection, divergence
// detection and rehearsals of failures (hooks; see rehearsals.h).
//
// The model comes from a factory that builds this rank's part for an
// nn::Placement (device, tensor-parallel group, pipeline stage), so the
// program never sees the layout. Its parameters start from their Inits
// under the run's seed, whatever the layout: every layout trains like one
// process on the same global batch (micro_batch x grad_accum x dp), up to
// float rounding.
//
// Every rank runs the same calls in the same order; step(), evaluate(),
// save_checkpoint() and full_parameters() are collective over the mesh.
// Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ht/ckpt/checkpoint.h"
#include "ht/comm/device_mesh.h"
#include "ht/core/client_state.h"
#include "ht/data/data_source.h"
#include "ht/nn/model.h"
#include "ht/optim/adamw.h"
#include "ht/optim/lr_schedule.h"
#include "ht/optim/sgd.h"
#include "ht/parallel/data_parallel.h"
#include "ht/parallel/layout.h"
#include "ht/parallel/pipeline.h"
#include "ht/precision/loss_scaler.h"
#include "ht/resilience/rank_guard.h"

namespace ht::train {

class TraceSession;  // src/train/trace_session.h
class ExpertLoads;   // src/train/expert_load.h
struct Policies;     // src/train/policies.h

class Job;

/// Builds this rank's part of the model for a placement.
using ModelFactory = std::function<std::unique_ptr<nn::Model>(const nn::Placement&)>;

struct EngineOptions {
  Device device = Device::cpu();
  std::int64_t steps = 100;
  /// The run's layout: the mesh (tp and pp must be the mesh's; dp 0 or
  /// the mesh's), ZeRO stage and shard group, rows per micro-batch and data-
  /// parallel rank, micro-batches per optimizer step, the pipeline schedule,
  /// its virtual stages and stage split (parallel/layout.h). Under the
  /// interleaved schedule the model is built virtual_stages times per rank,
  /// chunk c as virtual stage c pp + rank of pp v (nn::ModelChunks). Chosen
  /// stage sizes (stage_layers, e.g. {3, 5, 5, 3}: a lighter first and last
  /// stage make room for the embedding and the head) reach the model as its
  /// placement's stage boundaries.
  parallel::Layout layout{.micro_batch = 8};
  float lr = 1e-3f;
  float min_lr = 1e-4f;
  std::int64_t warmup_steps = 20;
  /// The decay after warm-up, from lr to min_lr at `steps` (optim::LrSchedule).
  optim::Decay lr_decay = optim::Decay::kCosine;
  /// A program's own schedule: the learning rate of 0-based step (replaces
  /// the one above; lr, min_lr and warmup_steps then only bound it).
  std::function<float(std::int64_t step)> lr_schedule;
  float grad_clip = 1.f;  // max global norm; <= 0 disables
  /// The optimizer: "adamw" (the default, with `adamw`) or "sgd" (with
  /// `sgd`); or a program's own, built over the rank's slots by
  /// `make_optimizer` (which then replaces the choice; its name() goes into
  /// checkpoints).
  std::string optimizer = "adamw";
  optim::AdamWOptions adamw;
  optim::SgdOptions sgd;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::Slot>)> make_optimizer;
  std::uint64_t seed = 1337;  // weights and data order
  /// Where the weights start from: the values of a parameter as its rank
  /// holds it (its tensor-parallel part, f32 on the host; ZeRO shards are
  /// cut from it), called once per parameter as the model is sharded.
  /// Empty: each parameter's own initialisation under `seed`
  /// (nn::Parameter::initial_value). A pretrained model: models::HFWeights::
  /// initial_value. A resumed checkpoint replaces these values either way.
  std::function<Tensor(const nn::Parameter&)> initial_values;
  std::int64_t eval_every = 25;  // 0: only at the end
  /// Validation samples per evaluation, spread over the data-parallel ranks
  /// (data::validation_ranges): the same samples under every layout. 0: no
  /// validation.
  std::int64_t eval_samples = 64;
  /// Mixed precision: the dtypes of the working copies and gradients, and
  /// the dtype gradients are reduced in (f32 masters always); f16 scales the
  /// loss dynamically (bf16 and f32 do not, unless forced).
  precision::Policy precision;
  /// Target gradient bucket size (ZeRO stages 0-2).
  std::int64_t bucket_bytes = std::int64_t(25) << 20;
  /// Activation recomputation (nn/module.h), applied to the model once
  /// it is built (nn::Model::set_recompute): kSelective recomputes the
  /// attention core in backward, kFull each block from its input. Losses
  /// and gradients are the same bits under every mode.
  nn::Recompute recompute = nn::Recompute::kNone;
  precision::LossScalerOptions loss_scaler;
  bool force_loss_scaling = false;
  /// Checkpoints: saved every ckpt_every steps and/or every ckpt_every_s
  /// seconds (0: only when asked; the time is rank 0's and every rank saves
  /// at the same step) under ckpt_dir (empty: none), the newest ckpt_keep
  /// kept; resume loads the newest good one at construction.
  std::string ckpt_dir;
  std::int64_t ckpt_every = 0;
  double ckpt_every_s = 0;
  int ckpt_keep = 3;
  bool resume = false;
  std::chrono::milliseconds ckpt_commit_delay{0};  // see ckpt::CheckpointOptions
  /// Memory tiers (ckpt/checkpoint.h; with ckpt_dir): a snapshot of every
  /// rank's state in its node's memory, replicated to a rank of another
  /// node, every mem_ckpt_every steps (0: none, the default here; -1: as
  /// often as a cost of 2% of a step allows, the cost measured by how much
  /// the snapshots slow rank 0's steps (a running mean) — the command
  /// line's default, --mem-ckpt-every auto), under mem_ckpt_dir (empty:
  /// ckpt::default_memory_dir(ckpt_dir)). resume loads it before disk when
  /// it is at least as new.
  std::int64_t mem_ckpt_every = 0;
  std::string mem_ckpt_dir;
  /// Resilience inside the rank: progress reports to a guard (heartbeat and
  /// watchdog; may be null), how many consecutive steps with a non-finite
  /// loss (not a loss-scale overflow) end the run with a divergence error,
  /// and how often (steps; 0: never) data-parallel replicas compare a
  /// checksum of their parameters (when on, also before every checkpoint).
  resilience::RankGuard* guard = nullptr;
  int divergence_steps = 3;
  std::int64_t sdc_every = 0;
  /// Straggler detection: every `straggler_window` steps (0: off) the ranks
  /// compare their mean work per step (time before the gradient reduction);
  /// a rank above `straggler_threshold` x the median for
  /// `straggler_windows` windows in a row is reported.
  std::int64_t straggler_window = 0;
  double straggler_threshold = 1.5;
  int straggler_windows = 3;
  /// A timeline of steps trace_first..trace_last (1-based, inclusive; a run
  /// that ends or resumes inside the range traces what it runs of it):
  /// every rank writes trace_path with ".rank<R>" before its extension, as
  /// Chrome trace-event JSON — the engine's phases, forward and backward per
  /// micro-batch, pipeline waits, and every collective and transfer from the
  /// flight recorder (queued, running). Time 0 of every rank's file is the
  /// end of a world barrier before the first traced step; ht-trace merges
  /// the files into one that Perfetto and chrome://tracing open. Empty: off.
  std::string trace_path;
  std::int64_t trace_first = 3, trace_last = 5;

  /// Throws kConfig naming the bad value (the layout's by layout_problem).
  void validate() const;
};

/// One mixture-of-experts layer's step (nn::MoE), over every rank that saw
/// its tokens: the token choices each expert took (they add up to the
/// step's tokens x top_k), and the auxiliary losses' mean over the
/// micro-batches (coefficients included).
struct ExpertLoad {
  std::string layer;  // the module's path in the model ("layers.3.mlp")
  std::vector<std::int64_t> tokens;
  std::int64_t dropped = 0;  // choices past an expert's capacity (nn::MoEOptions::capacity_factor)
  double aux_loss = 0, z_loss = 0;
  /// The busiest expert's tokens over the mean (1: balanced).
  double max_over_mean() const;
};

struct StepStats {
  std::int64_t step = 0;  // 1-based
  float loss = 0.f;       // the step's loss: the mean of its micro-batch means, or its sum over its count (nn/loss.h)
  float lr = 0.f;
  float grad_norm = 0.f;  // of the unscaled gradients; non-finite on a skipped step
  float loss_scale = 1.f;  // the scale this step's backward used
  bool skipped = false;    // an overflow: no update (mixed precision)
  std::int64_t skipped_steps = 0;  // so far
  bool checkpointed = false;       // a save of this step started
  bool stop_requested = false;     // some rank got SIGTERM/SIGUSR1 (the same on every rank)
  std::string stragglers;          // a straggler report made at this step (the same on every rank)
  std::vector<int> straggler_ranks;  // the world ranks it names
  std::string checkpoint_error;    // a previous save's failure, reported once
  bool snapshotted = false;        // a memory snapshot of this step started
  std::string snapshot_error;      // a previous snapshot's failure, reported once
  double ms = 0.0;
  std::int64_t tokens = 0;  // target elements of the whole global batch
  /// The model's FLOPs per token at this step's micro-batch shape
  /// (nn::Model::flops_per_token; 0 when the model does not say).
  double flops_per_token = 0;
  /// Every mixture-of-experts layer of the model, whichever stage holds it
  /// (the same on every rank); empty without one.
  std::vector<ExpertLoad> experts;
  double tokens_per_s() const { return ms > 0 ? double(tokens) * 1000.0 / ms : 0.0; }
};

/// An evaluation over the validation samples.
struct EvalStats {
  double loss = 0;          // mean over the samples (each micro-batch's mean loss weighed by its rows), or sum / count
  std::int64_t samples = 0;
  /// The model's metrics (nn::Model::metric_names), each its mean per
  /// sample, or its sum over its count when the model gave one.
  std::map<std::string, double> metrics;
};

/// Code that runs at fixed points of every step, out of its main path:
/// failure rehearsals (rehearsals.h), tests, instrumentation. Each may be empty.
struct StepHooks {
  /// At the start of step `step` (1-based), inside its timing.
  std::function<void(std::int64_t step)> before_step;
  /// Once the step's gradients are reduced, before they are unscaled and
  /// checked: the optimizer's slots hold the gradients this rank owns, and
  /// `local_loss` is this rank's contribution to the step's loss sum
  /// (non-zero on the last stage's tp rank 0 only), both mutable.
  std::function<void(std::int64_t step, float& local_loss)> after_gradients;
  /// After the step's update (not after a skipped step's).
  std::function<void(std::int64_t step)> after_update;
  /// After a checkpoint of `step` started (it may still be in flight).
  std::function<void(std::int64_t step)> after_checkpoint;
  /// At the end of the step, with its statistics.
  std::function<void(const StepStats& stats)> after_step;
};

class Engine {
 public:
  /// Builds this rank's part of the model (make_model), its parallel layout
  /// and optimizer on `mesh` (collective over it; null: a mesh of this
  /// process alone), attaches `data` and, with options.resume, loads the
  /// newest good checkpoint (data position and client state included).
  /// `data` and `mesh` must outlive the engine. Throws kConfig naming what
  /// does not fit (options, a model that does not split over the mesh).
  Engine(const EngineOptions& options, const ModelFactory& make_model, data::DataSource& data,
         comm::DeviceMesh* mesh = nullptr);
  /// The same on `job`'s mesh, reporting progress to its guard and
  /// rehearsing its HT_FAULTS (rehearsals.h): what a program run under
  /// htrun needs. `job` must outlive the engine.
  Engine(Job& job, EngineOptions options, const ModelFactory& make_model, data::DataSource& data);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// One optimizer step (grad_accum micro-batches).
  StepStats step();
  /// The loss and the model's metrics over eval_samples validation samples
  /// (the same ones whatever the layout). Throws kConfig when eval_samples
  /// is 0 or the data source has no validation data.
  EvalStats evaluate();
  /// Every parameter at full shape on world rank 0 (empty elsewhere); collective.
  std::map<std::string, Tensor> full_parameters();

  /// Starts an asynchronous checkpoint of the current state (collective;
  /// needs ckpt_dir): parameters, optimizer and loss-scaler state, the data
  /// source's position and client_state(). With sdc_every, replicas are
  /// compared first (throws kCorruption on a mismatch); while the loss is
  /// non-finite nothing is saved. Returns why not, or a previous save's
  /// failure, if any.
  std::string save_checkpoint();
  /// Saves the current step unless a save of it is under way or it was
  /// resumed from, and waits for every save; returns "" or what went wrong.
  /// Throws kConfig without a checkpoint directory.
  std::string checkpoint_now();
  /// Waits for the checkpoint in flight; returns its failure message, if any.
  std::string wait_for_checkpoint();
  /// The program's own state, saved with every checkpoint and restored on
  /// resume (DeepSpeed's client_state): set it before a save.
  ClientState& client_state() { return client_state_; }
  /// The step the run resumed from (0: a fresh start).
  std::int64_t resumed_from() const { return resumed_from_; }
  /// Training samples consumed so far over the whole mesh (the data
  /// position, saved with checkpoints: data/data_source.h).
  std::int64_t consumed_samples() const { return consumed_samples_; }
  ckpt::Checkpointer* checkpointer() { return checkpointer_.get(); }
  /// Steps taken, skipped ones included.
  std::int64_t steps_done() const { return steps_done_; }
  const precision::LossScaler& loss_scaler() const { return scaler_; }
  /// Adds hooks run at fixed points of every step (see StepHooks), after any added before.
  void add_hooks(StepHooks hooks) { hooks_.push_back(std::move(hooks)); }

  /// This rank's part of the model.
  nn::Model& model() { return *model_; }
  comm::DeviceMesh& mesh() { return *mesh_; }
  parallel::DataParallel& data_parallel() { return *dp_; }
  parallel::Pipeline& pipeline() { return *pipeline_; }
  data::DataSource& data() { return data_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  /// The options the engine runs with: the program's, with layout.dp resolved to the mesh's.
  const EngineOptions& options() const { return options_; }
  /// Rows per optimizer step over the whole mesh (micro_batch x grad_accum x dp).
  std::int64_t global_batch() const;
  /// The parameter count of the whole model (every stage, full shapes, tied weights once).
  std::int64_t num_parameters() const { return num_parameters_; }
  /// The model's description (nn::Model::describe), the same on every rank.
  const std::string& model_description() const { return description_; }
  /// The layers on each pipeline stage: options().layout.stage_layers, or the
  /// split by count of the model's nn::Model::num_layers(); empty when the
  /// model does not say how many layers it has.
  const std::vector<int>& stage_split() const { return stage_split_; }

 private:
  /// The factory's model for `placement`, checked to be built for it.
  std::unique_ptr<nn::Model> build_model(const ModelFactory& make_model, const nn::Placement& placement) const;
  /// This rank's part of the model for the layout: its stage, or under the
  /// interleaved schedule its chunks (nn::ModelChunks), without storage.
  std::unique_ptr<nn::Model> build_rank_model(const ModelFactory& make_model) const;
  void resume();
  void progress(resilience::Phase phase);
  /// Silent-data-corruption check: replicas compare parameter checksums,
  /// reporting `phase`: the check's own, or the save's it runs for (so a
  /// rank held in it sorts with the save, after the loss reduction).
  void check_replicas(std::int64_t step, resilience::Phase phase = resilience::Phase::kReplicaCheck);
  ckpt::RunState run_state() const;
  /// The sum over the world of `v` (one value per rank).
  std::vector<float> world_sum(std::vector<float> v);
  /// What the ranks decided together in a step's one control all-reduce
  /// (each true when any rank voted for it).
  struct StepVotes {
    bool stop = false;                // a rank was asked to stop (preemption)
    bool checkpoint_by_time = false;  // rank 0's clock: a time-based checkpoint is due
    bool snapshot_due = false;        // rank 0's count: a memory snapshot is due
    bool snapshot_busy = false;       // a rank is still writing the last snapshot
  };
  // The step's phases, in order (step() runs them).
  std::vector<data::MicroBatch> draw_step(const StepStats& s);
  /// Returns this rank's share of the loss sums (zeros on ranks that do not
  /// report it; the sum as the after_gradients hooks left it).
  parallel::LossSums forward_backward(const StepStats& s, const std::vector<data::MicroBatch>& batches,
                                      std::chrono::steady_clock::time_point start);
  /// Refuses a module called more often per micro-batch than its
  /// parameters' uses() (Parameter::note_forward counts the calls).
  void check_parameter_uses();
  /// The update; the step's loss count (`my_loss`'s count summed over the
  /// world) rides in the gradient norm's all-reduce and sets the gradient's
  /// normalisation. Returns the count.
  double apply_update(StepStats& s, const parallel::LossSums& my_loss);
  /// The loss (the world's sum over `loss_count`), the votes, and the
  /// divergence check on the agreed loss.
  StepVotes agree_on_step(StepStats& s, float my_loss, double loss_count);
  void save_if_due(StepStats& s, const StepVotes& votes);
  /// This rank's micro-batches of the next step (training) or of an evaluation.
  std::vector<data::MicroBatch> draw_training();
  std::vector<data::MicroBatch> draw_validation();
  /// Checks `b` has `rows` rows (input, target and side inputs) and passes it to the model's check_batch.
  void check_drawn(const data::MicroBatch& b, std::int64_t rows, const char* what, std::int64_t first) const;
  /// Under context parallelism, `b`'s input and target become this rank's
  /// two chunks of each sequence (nn::context_chunks); side inputs are refused.
  void take_context_chunks(data::MicroBatch& b) const;
  /// A stream source's share ("dp 2 x micro-batch 8"); "" for a random-access one.
  std::string stream_shard() const;

  EngineOptions options_;
  data::DataSource& data_;
  std::unique_ptr<comm::DeviceMesh> own_mesh_;
  comm::DeviceMesh* mesh_;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<parallel::DataParallel> dp_;
  std::unique_ptr<parallel::Pipeline> pipeline_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::LrSchedule schedule_;
  precision::LossScaler scaler_;
  std::unique_ptr<ckpt::Checkpointer> checkpointer_;
  std::vector<StepHooks> hooks_;
  ClientState client_state_;
  std::string description_;
  std::vector<int> stage_split_;
  std::int64_t num_parameters_ = 0;
  std::int64_t steps_done_ = 0;
  std::int64_t resumed_from_ = 0;
  std::int64_t consumed_samples_ = 0;
  // Divergence, stragglers, checkpoint and snapshot cadence, replica checks (src/train/policies.h).
  std::unique_ptr<Policies> policies_;
  std::unique_ptr<TraceSession> trace_;       // options_.trace_path: the steps being traced
  std::unique_ptr<ExpertLoads> expert_loads_;  // the model's MoE layers; null without one
};

}  // namespace ht::train
