// ht::train::Trainer: the training loop for GPT models on one rank of a
// pp x dp x tp mesh (a mesh of one process by default) — micro-batches with
// gradient accumulation through the pipeline schedule, data parallelism or
// ZeRO, global-norm clipping, AdamW with warm-up + cosine schedule, periodic
// validation and metrics.
//
// Every rank runs the same calls in the same order; step() and evaluate()
// are collective over the mesh. The global batch is micro_batch x grad_accum
// x dp sequences; every rank sees the same numbers (loss, norm) as one
// process training on the whole batch would, up to float rounding.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "ht/ckpt/checkpoint.h"
#include "ht/comm/device_mesh.h"
#include "ht/data/batch_sampler.h"
#include "ht/data/token_dataset.h"
#include "ht/nn/gpt.h"
#include "ht/optim/adamw.h"
#include "ht/optim/lr_schedule.h"
#include "ht/parallel/data_parallel.h"
#include "ht/parallel/pipeline.h"
#include "ht/precision/loss_scaler.h"
#include "ht/resilience/faults.h"
#include "ht/resilience/rank_guard.h"

namespace ht::train {

class Trainer;

struct TrainerOptions {
  nn::GPTConfig model;
  Device device = Device::cpu();
  std::int64_t steps = 100;
  std::int64_t micro_batch = 8;  // sequences per micro-batch and data-parallel rank
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
  /// Data parallelism / ZeRO (the mesh gives dp, tp and pp).
  parallel::DataParallelOptions data_parallel;
  parallel::Schedule schedule = parallel::Schedule::k1F1B;
  /// Mixed precision: data_parallel.precision chooses the dtypes; f16 scales
  /// the loss dynamically (bf16 and f32 do not, unless forced).
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
  /// Resilience inside the rank: progress reports to a guard (heartbeat and
  /// watchdog; may be null), failures to rehearse, how many consecutive steps
  /// with a non-finite loss (not a loss-scale overflow) end the run with a
  /// divergence error, and how often (steps; 0: never) data-parallel
  /// replicas compare a checksum of their parameters (when on, also before
  /// every checkpoint).
  resilience::RankGuard* guard = nullptr;
  resilience::FaultPlan faults;
  int divergence_steps = 3;
  std::int64_t sdc_every = 0;
  /// Straggler detection: every `straggler_window` steps (0: off) the ranks
  /// compare their mean work per step (time before the gradient reduction);
  /// a rank above `straggler_threshold` x the median for
  /// `straggler_windows` windows in a row is reported.
  std::int64_t straggler_window = 0;
  double straggler_threshold = 1.5;
  int straggler_windows = 3;
  /// Called on every rank once a step's gradients are reduced, before they
  /// are unscaled and checked (fault injection and tests); the optimizer's
  /// slots hold the gradients this rank owns.
  std::function<void(Trainer&, std::int64_t step)> after_gradients;

  /// Throws kConfig naming the bad value.
  void validate() const;
};

struct StepStats {
  std::int64_t step = 0;  // 1-based
  float loss = 0.f;       // mean over the step's micro-batches
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
  double ms = 0.0;
  std::int64_t tokens = 0;
  double tokens_per_s() const { return ms > 0 ? double(tokens) * 1000.0 / ms : 0.0; }
};

class Trainer {
 public:
  /// Builds and initialises this rank's part of the model and its optimizer
  /// on `mesh` (collective over it; null: a mesh of this process alone).
  /// `splits` and `mesh` must outlive the trainer.
  Trainer(const TrainerOptions& options, const data::TokenSplits& splits, comm::DeviceMesh* mesh = nullptr);
  ~Trainer();

  /// One optimizer step (grad_accum micro-batches).
  StepStats step();
  /// Mean loss over `eval_batches` sequential validation batches.
  float evaluate();
  /// Every parameter at full shape on world rank 0 (empty elsewhere); collective.
  std::map<std::string, Tensor> full_parameters();

  /// Starts an asynchronous checkpoint of the current state (collective;
  /// needs ckpt_dir). With sdc_every, replicas are compared first (throws
  /// kCorruption on a mismatch); while the loss is non-finite nothing is
  /// saved. Returns why not, or a previous save's failure, if any.
  std::string save_checkpoint();
  /// Waits for the checkpoint in flight; returns its failure message, if any.
  std::string wait_for_checkpoint();
  /// The step the run resumed from (0: a fresh start).
  std::int64_t resumed_from() const { return resumed_from_; }
  ckpt::Checkpointer* checkpointer() { return checkpointer_.get(); }
  /// Steps taken, skipped ones included.
  std::int64_t steps_done() const { return steps_done_; }
  const precision::LossScaler& loss_scaler() const { return scaler_; }

  /// This rank's part of the model.
  nn::GPT& model() { return *model_; }
  comm::DeviceMesh& mesh() { return *mesh_; }
  parallel::DataParallel& data_parallel() { return *dp_; }
  parallel::Pipeline& pipeline() { return *pipeline_; }
  /// Sequences per optimizer step over the whole mesh.
  std::int64_t global_batch() const;
  optim::AdamW& optimizer() { return *optimizer_; }
  const TrainerOptions& options() const { return options_; }

 private:
  void resume();
  void progress(const char* phase);
  /// Rehearsed failures due at the start of step `step` (crash, hang, slow).
  void inject_step_faults(std::int64_t step);
  /// Silent-data-corruption check: replicas compare parameter checksums.
  void check_replicas(std::int64_t step);

  /// The sum over the world of `v` (one value per rank).
  std::vector<float> world_sum(std::vector<float> v);

  TrainerOptions options_;
  const data::TokenSplits& splits_;
  std::unique_ptr<comm::DeviceMesh> own_mesh_;
  comm::DeviceMesh* mesh_;
  std::unique_ptr<nn::GPT> model_;
  std::unique_ptr<parallel::DataParallel> dp_;
  std::unique_ptr<parallel::Pipeline> pipeline_;
  std::unique_ptr<optim::AdamW> optimizer_;
  optim::CosineSchedule schedule_;
  precision::LossScaler scaler_;
  std::int64_t steps_done_ = 0;
  std::int64_t resumed_from_ = 0;
  int nonfinite_run_ = 0;  // consecutive steps with a non-finite loss
  /// Straggler detection at the end of a window: fills s.stragglers and
  /// s.straggler_ranks.
  void check_stragglers(StepStats& s);
  /// Whether a time-based checkpoint is due (rank 0's clock decides).
  bool checkpoint_due_by_time() const;
  double last_step_ms_ = 0;  // the last step's time without injected delays
  double window_work_ms_ = 0;
  std::vector<int> slow_windows_;  // per world rank: consecutive slow windows
  double injected_ms_ = 0;
  std::unique_ptr<ckpt::Checkpointer> checkpointer_;
  std::chrono::steady_clock::time_point last_checkpoint_time_ = std::chrono::steady_clock::now();
  bool checkpoint_deferred_ = false;  // a save is due but waits for a finite loss
  std::int64_t replicas_checked_step_ = -1;  // the step of the last replica comparison
  data::BatchSampler train_sampler_;
  data::BatchSampler val_sampler_;
};

/// The unigram entropy (nats per token) of a token array: the loss of the best
/// model that ignores context; a trained model should end well below it.
double unigram_entropy(const std::vector<std::int32_t>& tokens, std::int64_t vocab_size);

}  // namespace ht::train
