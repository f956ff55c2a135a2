// ht::nn::Context: what one micro-batch's forward leaves for its backward.
//
// The caller owns one Context per micro-batch in flight, so a pipeline can
// hold several at once, and what is saved is the module's choice (activation
// recomputation is saving less). A module may run several times in one
// forward (a layer shared by two places of a model): each run's tensors are
// kept, and backward, which runs in the reverse order, takes the newest
// first (Module::backward drops an entry once its backward is done). A
// module under full recomputation (module.h) keeps only its input, in an
// entry marked so (save_input_for_recompute). Not thread-safe.
//
// Zero-bubble pipelines (parallel::Schedule::kZeroBubbleH1) split a backward
// in two: the input's gradient (B, which the previous stage waits for) now,
// the weights' gradients (W) later, in the pipeline's idle time. With
// set_defer_weight_grads(true), a layer whose weight gradient is a GEMM of
// its own (Linear, LMHead) hands it to weight_grad(), which keeps it with
// the tensors it reads instead of running it; run_weight_grads() runs what
// was kept, in the order it was handed over (so gradients accumulate in the
// same order as without deferral). Norm gains, biases and embeddings stay
// in B: they cost little. A module must therefore not write into a tensor
// it passed as dy to a child's backward, nor into its saved input.
//
// Side inputs are what layers deep inside a model read beside their input
// (a padding mask "key_mask"; the documents of packed rows, "document_ids",
// which GPT's and Llama's attention read). The engine gives a micro-batch's side inputs
// (data::MicroBatch::side) to every pipeline stage's context and then seals
// them: a model that set one in its own forward would give it to its first
// stage only, and the later stages would silently run without it, so
// set_side_input on a sealed context is refused by name.
//
// The batch (BatchInfo) says whether the forward trains (dropout acts only
// then), the run's seed and the global index of the micro-batch's first
// sample, which key anything random per sample, so that it does not depend
// on the layout. Evaluation forwards add their metrics' sums to the context
// (add_metric), which the engine sums over micro-batches and ranks.
//
// A forward-only module (Module::compute) keeps its recorded tape here
// (save_tape / tape), one per run as other saved tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ht/core/tensor.h"

namespace ht::nn {

class Module;
class Tape;

/// What a forward is run for, and where its micro-batch sits in the run.
struct BatchInfo {
  bool training = false;            // a training forward (dropout acts); false: evaluation, inference
  std::uint64_t seed = 0;           // the run's seed
  std::int64_t first_sample = 0;    // the global index of row 0's sample
};

class Context {
 public:
  /// `save_for_backward` false: an inference pass; modules save nothing.
  explicit Context(Device device = Device::cpu(), bool save_for_backward = true)
      : device_(device), saving_(save_for_backward) {}

  Device device() const { return device_; }
  bool saving() const { return saving_; }

  /// Stores the tensors one forward run of `m` needs in backward (call it
  /// once per run; each run's entry is kept).
  void save(const Module* m, std::vector<Tensor> tensors);
  /// The tensors of `m`'s newest run not yet backpropagated; throws
  /// kInvalidArgument when there are none (backward without a forward in
  /// this context).
  const std::vector<Tensor>& saved(const Module* m) const;
  /// Drops `m`'s newest entry, if any (after its backward).
  void pop(const Module* m);
  /// saved(m), then pop(m): for a model's backward_loss, whose loss entry
  /// must be gone before backward() reads the forward's own.
  std::vector<Tensor> take(const Module* m);
  /// Stores `inputs` (the input, then any further ones) as the whole of one
  /// forward run of `m`, marked for recomputation: m's backward runs its
  /// forward again from them (Module::forward under Recompute::kFull).
  /// Nothing when not saving.
  void save_input_for_recompute(const Module* m, std::vector<Tensor> inputs);
  /// Whether `m` has an entry not yet backpropagated.
  bool holds(const Module* m) const {
    const auto it = saved_.find(m);
    return it != saved_.end() && !it->second.empty();
  }
  /// Whether `m`'s newest entry is one of save_input_for_recompute's
  /// (false when there is none).
  bool recomputes(const Module* m) const;
  /// A new context on the same device, saving or not, carrying this one's
  /// side inputs and nothing saved: where a full recomputation runs a
  /// module's forward (without saving) and, in backward, again (saving).
  /// A full recomputation's backward defers into this context's queue.
  Context fresh(bool save_for_backward) const {
    Context c(device_, save_for_backward);
    c.side_ = side_;
    c.sealed_ = sealed_;
    c.batch_ = batch_;
    c.deferred_ = deferred_;
    c.aux_loss_grad_scale_ = aux_loss_grad_scale_;
    c.aux_loss_grads_ = aux_loss_grads_;
    return c;
  }
  /// Drops everything saved and the side inputs, and unseals them (frees
  /// activations once backward is done).
  void clear() {
    saved_.clear();
    side_.clear();
    sealed_ = false;
  }

  /// Module m's further inputs (Module::forward(ctx, x, more)) on their way
  /// to its forward_impl, which takes them (the default one passes them to
  /// compute_with); none otherwise.
  void set_call_inputs(const Module* m, std::vector<Tensor> more) {
    if (more.empty())
      call_inputs_.erase(m);
    else
      call_inputs_[m] = std::move(more);
  }
  std::vector<Tensor> take_call_inputs(const Module* m) { return take_from(call_inputs_, m); }
  bool has_call_inputs(const Module* m) const { return call_inputs_.count(m) > 0; }
  /// The gradients of a module's further inputs, from its backward to the
  /// caller (Tape::call), in their order; undefined where none flows.
  void put_call_input_grads(const Module* m, std::vector<Tensor> grads) { call_grads_[m] = std::move(grads); }
  std::vector<Tensor> take_call_input_grads(const Module* m) { return take_from(call_grads_, m); }

  /// Further outputs of module m's forward (Tape::add_output: a pipeline
  /// stage's further tensors for the next stage), in order, and in
  /// backward their gradients, on their way to and from the pipeline.
  void put_more_outputs(const Module* m, std::vector<Tensor> outs) { more_outputs_[m] = std::move(outs); }
  std::vector<Tensor> take_more_outputs(const Module* m) { return take_from(more_outputs_, m); }
  void put_more_output_grads(const Module* m, std::vector<Tensor> grads) { more_output_grads_[m] = std::move(grads); }
  std::vector<Tensor> take_more_output_grads(const Module* m) { return take_from(more_output_grads_, m); }
  /// A pipeline stage's further inputs for a model's forward_loss (the last
  /// stage's), which the default one passes on to forward; none otherwise.
  void set_stage_inputs(std::vector<Tensor> more) { stage_inputs_ = std::move(more); }
  std::vector<Tensor> take_stage_inputs() { return std::exchange(stage_inputs_, {}); }

  /// Stores the tape one run of a forward-only module recorded (call it
  /// once per run, like save; nothing when not saving).
  void save_tape(const Module* m, std::shared_ptr<Tape> tape);
  /// The tape of `m`'s newest run not yet backpropagated; throws
  /// kInvalidArgument when its newest entry holds none.
  std::shared_ptr<Tape> tape(const Module* m) const;
  /// tape(m), then pop(m).
  std::shared_ptr<Tape> take_tape(const Module* m);
  /// Bytes held by saved tensors and those deferred weight gradients keep
  /// (views of one storage counted per view).
  std::int64_t saved_bytes() const;

  /// The factor the gradient of a mean loss of this micro-batch takes in
  /// its step (the loss scale over the micro-batches and replicas the step
  /// averages): what a loss a layer computes inside the model (nn::MoE's
  /// load-balancing and z-losses) multiplies its gradient by, since its
  /// backward starts from the layer's output gradient, not from a loss.
  /// Unset (nullopt) until its driver sets it.
  void set_aux_loss_grad_scale(float scale) { aux_loss_grad_scale_ = scale; }
  std::optional<float> aux_loss_grad_scale() const { return aux_loss_grad_scale_; }
  /// A layer that added an auxiliary loss's gradient in backward says so;
  /// the record is shared with the fresh() contexts made from this one (a
  /// recomputed layer's backward runs in one). The engine refuses a
  /// token-normalised loss beside one: its gradients are divided by the
  /// step's token count, which would scale the auxiliary ones too.
  void note_aux_loss_grads() { *aux_loss_grads_ = true; }
  bool aux_loss_grads_added() const { return *aux_loss_grads_; }

  /// From now on, weight_grad() keeps what it is given (see the top).
  void set_defer_weight_grads(bool defer);
  bool defers_weight_grads() const { return deferred_ != nullptr; }
  /// A weight gradient computed from `inputs`: at once, or kept for
  /// run_weight_grads() when deferring.
  using WeightGrad = std::function<void(const std::vector<Tensor>& inputs)>;
  void weight_grad(std::vector<Tensor> inputs, WeightGrad compute);
  /// Runs the kept weight gradients in order and lets their tensors go.
  void run_weight_grads();
  /// How many weight gradients are kept.
  std::size_t pending_weight_grads() const { return deferred_ ? deferred_->size() : 0; }

  /// Side inputs of the micro-batch that layers deep inside a model read
  /// (a padding mask: "key_mask"): the engine sets a micro-batch's
  /// (data::MicroBatch::side) and seals them; code driving a module itself
  /// (a test, an inference loop) sets its own. Throws kConfig once sealed.
  void set_side_input(const std::string& name, Tensor t);
  /// The side input `name`, or null.
  const Tensor* side_input(const std::string& name) const {
    const auto it = side_.find(name);
    return it == side_.end() ? nullptr : &it->second;
  }
  /// From now on set_side_input is refused (see the top); contexts made by
  /// fresh() stay sealed.
  void seal_side_inputs() { sealed_ = true; }

  /// The micro-batch this forward runs (see the top).
  void set_batch(const BatchInfo& batch) { batch_ = batch; }
  const BatchInfo& batch() const { return batch_; }

  /// An evaluation metric's sums: reported as sum / count over the whole
  /// evaluation. A metric per sample (per_sample) leaves its count to the
  /// engine, which counts the micro-batch's samples.
  struct MetricSum {
    double sum = 0;
    double count = 0;
    bool per_sample = true;
  };
  /// Adds `sum` (over the micro-batch's samples) to the evaluation metric
  /// `name`, reported per sample (nn::Model::add_metrics).
  void add_metric(const std::string& name, double sum) { metric(name, true).sum += sum; }
  /// Adds `sum` over `count` things (tokens, say) to the metric `name`,
  /// reported as its sum over its count: a token-weighted metric.
  void add_metric(const std::string& name, double sum, double count) {
    MetricSum& m = metric(name, false);
    m.sum += sum;
    m.count += count;
  }
  const std::map<std::string, MetricSum>& metrics() const { return metrics_; }

 private:
  Device device_;
  bool saving_;
  struct Entry {
    std::vector<Tensor> tensors;
    bool recompute = false;  // tensors = {input}: backward runs the forward again
    std::shared_ptr<Tape> tape;  // a forward-only module's run
  };
  const Entry& newest(const Module* m) const;
  MetricSum& metric(const std::string& name, bool per_sample);

  std::unordered_map<const Module*, std::vector<Entry>> saved_;  // a stack per module
  std::unordered_map<std::string, Tensor> side_;
  bool sealed_ = false;
  BatchInfo batch_;
  std::map<std::string, MetricSum> metrics_;
  static std::vector<Tensor> take_from(std::unordered_map<const Module*, std::vector<Tensor>>& slots,
                                       const Module* m) {
    const auto it = slots.find(m);
    if (it == slots.end()) return {};
    std::vector<Tensor> v = std::move(it->second);
    slots.erase(it);
    return v;
  }
  std::unordered_map<const Module*, std::vector<Tensor>> call_inputs_;
  std::unordered_map<const Module*, std::vector<Tensor>> more_outputs_, more_output_grads_;
  std::vector<Tensor> stage_inputs_;
  std::unordered_map<const Module*, std::vector<Tensor>> call_grads_;
  struct Deferred {
    std::vector<Tensor> inputs;
    WeightGrad compute;
  };
  // Shared with fresh() contexts, so a recomputed module's backward defers
  // into the micro-batch's queue; null when not deferring.
  std::shared_ptr<std::vector<Deferred>> deferred_;
  std::optional<float> aux_loss_grad_scale_;
  std::shared_ptr<bool> aux_loss_grads_ = std::make_shared<bool>(false);
};

}  // namespace ht::nn
