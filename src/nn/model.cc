// ht::nn::Model: placement, defaults, initial values.
#include "ht/nn/model.h"

#include <cmath>

namespace ht::nn {

Model::Model(std::string name, const Placement& placement) : Module(std::move(name)), placement_(placement) {
  const PipelineStage& s = placement.stage;
  HT_CHECK(s.size > 0 && s.rank >= 0 && s.rank < s.size, ErrorKind::kInvalidArgument,
           "model '{}': pipeline stage {} outside a pipeline of {}", this->name(), s.rank, s.size);
}

Loss Model::loss(const Var& /*output*/, const Tensor& /*target*/) {
  HT_CHECK(false, ErrorKind::kNotSupported,
           "model '{}' ({}) says nothing of its loss: define loss(output, target) (e.g. cross_entropy(output, target); "
           "see nn/functional.h), or override both forward_loss and backward_loss",
           name(), describe());
  return Var();
}

LossValue Model::forward_loss(Context& ctx, const Tensor& input, const Tensor& target) {
  const Tensor y = forward(ctx, input, ctx.take_stage_inputs());
  if (!ctx.batch().training) add_metrics(ctx, y, target);
  // The loss's own tape, kept under the model above the forward's entry:
  // backward_loss takes it first.
  auto tape = std::make_shared<Tape>(ctx);
  const Loss l = loss(tape->input(y), target);
  const Var& v = l.value;
  HT_CHECK(v.defined() && v.tensor().numel() == 1 && v.dtype() == DType::kF32, ErrorKind::kInvalidArgument,
           "model '{}': loss() must return an f32 scalar (the micro-batch's mean loss, or a sum with its count), got "
           "{} {}",
           name(), v.defined() ? dtype_name(v.dtype()) : std::string("nothing"),
           v.defined() ? shape_str(v.shape()) : std::string());
  HT_CHECK(!l.summed || (std::isfinite(l.count) && l.count >= 0), ErrorKind::kInvalidArgument,
           "model '{}': loss() gave a sum over a count of {}: a count must be finite and >= 0", name(), l.count);
  if (ctx.saving()) {
    tape->set_output(v);
    ctx.save_tape(this, tape);
  }
  return {.value = v.tensor().item(0), .summed = l.summed, .count = l.count};
}

Tensor Model::backward_loss(Context& ctx, float grad_scale) {
  const std::shared_ptr<Tape> tape = ctx.take_tape(this);
  const Tensor seed = Tensor::from_vector(std::vector<float>{grad_scale}, {}).to(device());
  return backward(ctx, tape->backward(ctx, seed));
}

Shape Model::stage_input_shape(const Shape&) const {
  HT_CHECK(false, ErrorKind::kNotSupported,
           "model '{}' ({}) does not split into pipeline stages: it declares no stage_input_shape; train it with --pp 1",
           name(), describe());
  return {};
}

void Model::require_single_stage() const {
  HT_CHECK(stage().size == 1, ErrorKind::kConfig,
           "model '{}' does not split into pipeline stages, but the layout asks for {} (--pp {}): train it with --pp 1",
           name(), stage().size, stage().size);
}

void Model::set_recompute(Recompute mode) {
  for (Module* c : children())
    c->set_recompute(mode == Recompute::kFull && c->children().empty() ? Recompute::kNone : mode);
}

void Model::init_weights(std::uint64_t seed) {
  for (Parameter* p : parameters())
    if (p->data().defined()) p->data().copy_from(p->initial_value(seed));
}

}  // namespace ht::nn
