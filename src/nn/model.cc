// ht::nn::Model: placement, defaults, initial values.
#include "ht/nn/model.h"

namespace ht::nn {

Model::Model(std::string name, const Placement& placement) : Module(std::move(name)), placement_(placement) {
  const PipelineStage& s = placement.stage;
  HT_CHECK(s.size > 0 && s.rank >= 0 && s.rank < s.size, ErrorKind::kInvalidArgument,
           "model '{}': pipeline stage {} outside a pipeline of {}", this->name(), s.rank, s.size);
}

Var Model::loss(const Var& /*output*/, const Tensor& /*target*/) {
  HT_CHECK(false, ErrorKind::kNotSupported,
           "model '{}' ({}) says nothing of its loss: define loss(output, target) (e.g. cross_entropy(output, target); "
           "see nn/functional.h), or override both forward_loss and backward_loss",
           name(), describe());
  return {};
}

float Model::forward_loss(Context& ctx, const Tensor& input, const Tensor& target) {
  const Tensor y = forward(ctx, input);
  if (!ctx.batch().training) add_metrics(ctx, y, target);
  // The loss's own tape, kept under the model above the forward's entry:
  // backward_loss takes it first.
  auto tape = std::make_shared<Tape>(ctx);
  const Var l = loss(tape->input(y), target);
  HT_CHECK(l.defined() && l.tensor().numel() == 1 && l.dtype() == DType::kF32, ErrorKind::kInvalidArgument,
           "model '{}': loss() must return an f32 scalar (the micro-batch's mean loss), got {} {}", name(),
           l.defined() ? dtype_name(l.dtype()) : std::string("nothing"),
           l.defined() ? shape_str(l.shape()) : std::string());
  if (ctx.saving()) {
    tape->set_output(l);
    ctx.save_tape(this, tape);
  }
  return l.tensor().item(0);
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
