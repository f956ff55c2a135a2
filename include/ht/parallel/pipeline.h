// ht::parallel::Pipeline: runs one optimizer step's micro-batches through
// this rank's pipeline stage of any nn::Model, under the GPipe, 1F1B,
// interleaved 1F1B or ZB-H1 schedule.
//
// Stage s receives activations from stage s - 1 (of the shape the model's
// stage_input_shape gives, in the compute dtype) and sends its own to
// s + 1; gradients flow back the same way. The first stage reads each
// micro-batch's input, the last its target and computes the loss. Each
// micro-batch in flight has its own nn::Context, freed after its backward.
// The order of forwards, backwards and transfers is the schedule's action
// table (schedule.h: GPipe holds m micro-batches of activations, 1F1B at
// most p - s); the pipeline executes it, keeping each tensor in flight under
// its (micro-batch, chunk). Paired transfers (send an activation and
// receive a gradient) are one send_recv, so no schedule can deadlock on
// blocking sends.
//
// ZB-H1 runs each backward in two (nn::Context::set_defer_weight_grads): B
// computes the input's gradient and keeps the weight gradients' GEMMs; W
// runs them, in micro-batch order as a fused backward would, so the
// gradients are the same sums. The step's final backward (where data
// parallelism starts reducing) is the last B, and only its own W follows.
//
// Interleaved 1F1B runs over a model of nn::ModelChunks (v chunks, chunk c
// of rank r being virtual stage c p + r); transfers go to the next and
// previous rank around the ring. Each chunk's last backward (micro-batch
// m - 1's through it) completes that chunk's gradients, and is announced
// so: data parallelism starts reducing a chunk's buckets while the other
// chunks' backwards run (DataParallel::set_final_part).
//
// With one stage every schedule but interleaved is plain gradient
// accumulation.
//
// Before each stage's forward of a micro-batch the pipeline gives its
// context the micro-batch's side inputs (data::MicroBatch::side, on the
// model's device), sealed, and its batch: training or not, the run's seed
// and the global index of its first sample (nn::BatchInfo). Every rank holds
// every micro-batch of its data-parallel rank, so side inputs reach every
// stage without a transfer.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ht/comm/communicator.h"
#include "ht/data/data_source.h"
#include "ht/nn/model.h"
#include "ht/parallel/schedule.h"

namespace ht::parallel {

/// The losses of a step's or an evaluation's micro-batches on the last
/// stage (0 elsewhere), added up: their loss is sum / count.
///   - a step: a mean counts 1 per micro-batch (its mean added); a
///     token-normalised sum adds its sum and count, both divided by the
///     micro-batch's target element count (the backward's divisor, see
///     train_step), so that the engine's division by the whole step's count
///     corrects the gradient;
///   - an evaluation: a mean counts the micro-batch's rows (mean x rows
///     added); a sum its own count.
struct LossSums {
  double sum = 0;
  double count = 0;
  /// A training step's: whether the loss is a token-normalised sum (known
  /// on the last stage), and whether a layer added an auxiliary loss's
  /// gradient on this stage (nn::Context::note_aux_loss_grads).
  bool summed = false;
  bool aux_loss_grads = false;
};

/// An evaluation's sums on the last stage (0 and empty elsewhere).
struct Evaluation {
  LossSums loss;
  /// nn::Model::add_metrics' sums; per-sample metrics count rows.
  std::map<std::string, nn::Context::MetricSum> metric_sums;
};

struct PipelineStats {
  double compute_ms = 0;  // this stage's forward and backward work
  double idle_ms = 0;     // waiting for a neighbour's activations or gradients
  std::int64_t peak_saved_bytes = 0;  // activations saved by micro-batches in flight, at most
};

class Pipeline {
 public:
  /// `pp` is the pipeline group: its rank is model.stage().rank. Activations
  /// travel between stages in `activations` (the compute dtype). The
  /// interleaved schedule needs an nn::ModelChunks (its chunks run as the
  /// virtual stages), the others a model of one chunk. `seed` is the run's
  /// (nn::BatchInfo).
  Pipeline(nn::Model& model, comm::Communicator& pp, Schedule schedule, DType activations = DType::kF32,
           std::uint64_t seed = 0);

  /// Forward and backward of every micro-batch (host batches, one per
  /// micro-batch; only the first stage reads inputs, the last targets). Each
  /// micro-batch's mean loss has gradient `loss_scale` (1/k for k micro-
  /// batches); a token-normalised sum `loss_scale` / its target's element
  /// count (the same for every micro-batch of the step). `before_backward(completes)` runs before each backward:
  /// `completes` is the chunk whose gradients this backward completes (its
  /// last of the step: the model itself, but for an interleaved pipeline),
  /// null for the others. Returns the micro-batches' losses on the last
  /// stage, zeros elsewhere.
  LossSums train_step(const std::vector<data::MicroBatch>& batches, float loss_scale,
                    const std::function<void(nn::Model* completes)>& before_backward);
  /// Forward only, not training (micro-batches may differ in rows): on the
  /// last stage the loss and metric sums, weighted by rows; empty elsewhere.
  Evaluation evaluate(const std::vector<data::MicroBatch>& batches);

  /// Timings of the last train_step.
  const PipelineStats& stats() const { return stats_; }
  Schedule schedule() const { return schedule_; }
  /// Model chunks per rank (1 but for the interleaved schedule).
  int virtual_stages() const { return int(chunks_.size()); }

 private:
  class Step;

  std::vector<nn::Model*> chunks_;
  comm::Communicator& pp_;
  Schedule schedule_;
  DType activations_;
  std::uint64_t seed_;
  PipelineStats stats_;
  /// The neighbours this rank has sent a header to, and received one from:
  /// the first transfer each way between two stages carries the tensor's
  /// shape and dtype first, which the receiver checks against its own.
  std::set<int> headed_to_, headed_from_;
};

}  // namespace ht::parallel
