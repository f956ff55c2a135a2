// ht::nn::Model: placement, defaults, initial values.
#include "ht/nn/model.h"

namespace ht::nn {

Model::Model(std::string name, const Placement& placement) : Module(std::move(name)), placement_(placement) {
  const PipelineStage& s = placement.stage;
  HT_CHECK(s.size > 0 && s.rank >= 0 && s.rank < s.size, ErrorKind::kInvalidArgument,
           "model '{}': pipeline stage {} outside a pipeline of {}", this->name(), s.rank, s.size);
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
