// ht::nn::Model: what the parallel layer and the training engine need to
// know of a model, beyond being a Module.
//
// A model is built for a Placement: the device, the tensor-parallel group its
// layers split over and the pipeline stage it is one part of (a model that
// does not split into stages refuses a stage count above one). Beyond
// Module's forward(ctx, x) / backward(ctx, dy), parameters and hooks, it
// declares:
//   - its loss, on the last stage: forward_loss(ctx, input, target) gives
//     the micro-batch's loss, a mean or a token-normalised sum with its
//     count (loss.h), and backward_loss(ctx, scale) backpropagates it;
//   - for pipelines, the shape of the activations a stage receives from the
//     one before (stage_input_shape), sent in the compute dtype;
//   - the weights it holds on several stages (tied_weights: GPT's token
//     embedding, reused by the output head on the last stage), whose
//     gradients the parallel layer sums across those stages;
//   - what it is (describe(): checkpoints record it and a resume must
//     match), and its matmul FLOPs per token, for MFU.
// The first stage's forward takes the micro-batch's input (floating inputs
// cast to the compute dtype, as the activations between stages are); the
// others take the previous stage's output. Initial values come from each parameter's
// Init (see init.h); ZeRO-3 and init_weights() read them.
//
// The parallel layer's ZeRO-3 units are the model's direct children, so a
// model meant for ZeRO-3 keeps its parameters in child modules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ht/nn/context_parallel.h"
#include "ht/nn/expert_parallel.h"
#include "ht/nn/loss.h"
#include "ht/nn/module.h"
#include "ht/nn/tensor_parallel.h"

namespace ht::nn {

/// One stage of a pipeline of `size` stages.
struct PipelineStage {
  int rank = 0;
  int size = 1;
  /// Which of the model's layers each stage runs: stage s runs
  /// [boundaries[s], boundaries[s + 1]), size + 1 entries from 0 to the
  /// model's layer count, strictly increasing (parallel::stage_boundaries
  /// makes them from layers per stage). Empty: by count, the first
  /// n_layers % size stages one layer more. A model that splits builds its
  /// stage from parallel::stage_range(n_layers, rank, size, boundaries),
  /// which refuses boundaries that do not fit it (kConfig).
  std::vector<int> boundaries;
  bool first() const { return rank == 0; }
  bool last() const { return rank == size - 1; }
};

struct Placement {
  Device device = Device::cpu();
  TensorParallel tp;  // no group: no tensor parallelism
  /// The context-parallel group (context_parallel.h); no group: none. A
  /// model under it receives its two chunks of every sequence (tokens (B,
  /// 2L) of a sequence of 2CL) and must give positions their global index
  /// and attend across the group; one that cannot refuses it (kNotSupported).
  ContextParallel cp;
  /// The expert-parallel group (expert_parallel.h); no group: none. Only a
  /// model with mixture-of-experts layers uses it.
  ExpertParallel ep;
  PipelineStage stage;
  /// Parameters may be built without storage (each module's released as
  /// soon as it is built): ZeRO-3 then fills its shards from the parameters'
  /// initial values, and no rank ever holds the whole model. A model may
  /// ignore it and build its storage as usual.
  bool defer_storage = false;
};

/// A tensor one pipeline stage sends the next (Model::stage_inputs).
struct StageTensor {
  std::string name;
  Shape shape;
};

/// A weight held by several pipeline stages under one name.
struct TiedWeight {
  std::string name;         // the parameter's name, the same on every stage holding it
  std::vector<int> stages;  // the stages holding a copy, ascending; the first holds the original
};

class Model : public Module {
 public:
  Model(std::string name, const Placement& placement);

  const Placement& placement() const { return placement_; }
  Device device() const { return placement_.device; }
  const TensorParallel& tensor_parallel() const { return placement_.tp; }
  const ContextParallel& context_parallel() const { return placement_.cp; }
  const PipelineStage& stage() const { return placement_.stage; }
  bool first_stage() const { return placement_.stage.first(); }
  bool last_stage() const { return placement_.stage.last(); }

  /// Last stage only. A forward-only model's loss for a micro-batch, from
  /// the model's output (a Var of the loss's own tape) and the target on
  /// the model's device, built from functional.h: a mean as an f32 scalar
  /// Var (cross_entropy, mse, ...), or a token-normalised sum and count
  /// (token_cross_entropy; loss.h). The default forward_loss and
  /// backward_loss run it. Throws kNotSupported by default: a model defines
  /// loss(), or forward_loss and backward_loss.
  virtual Loss loss(const Var& output, const Tensor& target);
  /// Last stage only. The loss of a micro-batch, a mean or a sum with its
  /// count: `input` as forward takes it, `target` on the model's device.
  /// Saves what backward_loss needs (ctx.save(this, ...) after the forward;
  /// backward_loss then takes it back with ctx.take(this) before calling
  /// backward()). In an evaluation (ctx.batch().training false) it also
  /// adds the model's metrics (add_metrics). By default: forward(),
  /// add_metrics in an evaluation, then loss() on a tape kept in ctx.
  virtual LossValue forward_loss(Context& ctx, const Tensor& input, const Tensor& target);
  /// Backward from the loss of the newest forward_loss in ctx (the mean, or
  /// the sum), its gradient multiplied by `grad_scale` (the engine's: 1/k
  /// for k accumulated micro-batches, times the loss scale under fp16, and
  /// for a sum 1 / the target's element count, which the step's division by
  /// its token count corrects). Accumulates into parameter gradients and
  /// returns the gradient of the stage's input (undefined on the first
  /// stage). By default: the loss's tape, then backward().
  virtual Tensor backward_loss(Context& ctx, float grad_scale);

  /// Validation metrics beside the loss, by name ("accuracy"), in the order
  /// the engine reports them: the same list on every stage. None by default.
  virtual std::vector<std::string> metric_names() const { return {}; }
  /// Last stage, evaluation only: adds each metric's sum over the
  /// micro-batch's samples to ctx (ctx.add_metric("accuracy", correct
  /// rows)) from the model's output and the target; the engine reports the
  /// mean per validation sample. A metric given with a count
  /// (ctx.add_metric("token_accuracy", correct tokens, tokens)) is reported
  /// as its sum over its count, both added over the whole evaluation. The
  /// default forward_loss calls it; a hand-written forward_loss calls it
  /// itself. Nothing by default.
  virtual void add_metrics(Context& ctx, const Tensor& output, const Tensor& target) const {
    (void)ctx, (void)output, (void)target;
  }

  /// Checks a micro-batch on the host when the engine draws it, before any
  /// device or peer sees it: throws ht::Error naming what is wrong (a token
  /// id outside the vocabulary, say), so a bad batch fails at once with the
  /// data's own coordinates instead of inside a kernel. Accepts everything
  /// by default.
  virtual void check_batch(const Tensor& /*input*/, const Tensor& /*target*/) const {}

  /// Pipelines: the shape of the activations this (non-first) stage
  /// receives, for a micro-batch whose first-stage input has `input_shape`.
  /// The default refuses: the model does not split into stages.
  virtual Shape stage_input_shape(const Shape& input_shape) const;
  /// Pipelines: every tensor this (non-first) stage receives, in order, by
  /// name (for messages) and shape, all in the compute dtype: the first is
  /// forward's x, the others compute_with's `more` (a decoder stage's state
  /// and the encoder's memory). The stage before sends what its forward
  /// returns, then what it added with Tape::add_output, in this order; each
  /// gets its gradient back. By default one tensor, "x", of
  /// stage_input_shape.
  virtual std::vector<StageTensor> stage_inputs(const Shape& input_shape) const {
    return {{"x", stage_input_shape(input_shape)}};
  }
  /// Weights held by more than one stage; the same list on every rank,
  /// whichever stage it holds. None by default.
  virtual std::vector<TiedWeight> tied_weights() const { return {}; }
  /// The whole model's layers that pipeline stages split (what
  /// PipelineStage::boundaries count: GPT's and Llama's blocks), for reports;
  /// 0 (the default) when the model does not say.
  virtual int num_layers() const { return 0; }

  /// Whether the model runs under context parallelism (Placement::cp): it
  /// gives positions their global index and attends across the group. The
  /// engine refuses --cp above 1 for a model that does not say so, since
  /// one that ignored the split would train on wrong numbers without an
  /// error. false by default.
  virtual bool supports_context_parallel() const { return false; }

  /// "GPT L6 H6 C384 V256 T256": the architecture and its sizes.
  virtual std::string describe() const = 0;
  /// Matmul FLOPs of one forward and backward per token of a micro-batch
  /// whose input has `input_shape` (6N plus attention's), for MFU; 0 when
  /// the model does not say.
  virtual double flops_per_token(const Shape& /*input_shape*/) const { return 0.0; }

  /// Copies each parameter's initial value (its Init under `seed`) into its storage.
  void init_weights(std::uint64_t seed);

  /// Activation recomputation for the model's parts (module.h); the
  /// model itself never recomputes whole (its loss keeps the output anyway,
  /// so a whole re-run would hold everything at once) and keeps kNone. The
  /// engine calls it with EngineOptions::recompute once the model is built.
  /// By default:
  ///   kNone, kSelective  every direct child and its descendants (the
  ///                      attention modules act on kSelective);
  ///   kFull              each direct child that has children of its own
  ///                      (a block: several layers whose intermediate
  ///                      activations it then no longer keeps), kNone to
  ///                      the direct children that are single layers (an
  ///                      embedding, a norm, a head: they keep little
  ///                      beyond their input, so recomputing them would
  ///                      cost a forward and save nothing).
  /// A model whose blocks are not its direct children, or that knows them
  /// better, overrides it (models::CausalLM: its blocks).
  void set_recompute(Recompute mode) override;

 protected:
  /// For a model that does not split into pipeline stages: throws kConfig
  /// naming it when the placement asks for more than one.
  void require_single_stage() const;
  /// add_module, then, when the placement defers storage, the child's
  /// parameters' storage released at once: the model never holds all its
  /// values while it is built.
  template <typename M>
  M& add_built(std::unique_ptr<M> child) {
    M& m = add_module(std::move(child));
    if (placement_.defer_storage)
      for (Parameter* p : m.parameters()) p->release_data();
    return m;
  }

 private:
  Placement placement_;
};

}  // namespace ht::nn
