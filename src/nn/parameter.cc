// ht::nn::Parameter.
#include "ht/nn/parameter.h"

namespace ht::nn {

Parameter::Parameter(std::string name, Shape full_shape, Tensor data, bool weight_decay)
    : name_(std::move(name)),
      full_shape_(std::move(full_shape)),
      shape_(data.shape()),
      data_(std::move(data)),
      weight_decay_(weight_decay) {}

void Parameter::set_data(Tensor t) {
  HT_CHECK(t.numel() == shape_numel(shape_), ErrorKind::kShapeMismatch,
           "parameter {}: new storage {} does not match its shape {}", name_, shape_str(t.shape()), shape_str(shape_));
  data_ = std::move(t);
}

void Parameter::set_grad(Tensor t) {
  HT_CHECK(t.numel() == shape_numel(shape_), ErrorKind::kShapeMismatch,
           "parameter {}: gradient {} does not match its shape {}", name_, shape_str(t.shape()), shape_str(shape_));
  grad_ = std::move(t);
}

void Parameter::allocate_grad() {
  if (grad_.defined()) return;
  HT_CHECK(data_.defined(), ErrorKind::kInvalidArgument,
           "parameter {}: its values are not present (a ZeRO-3 unit used without being gathered)", name_);
  grad_ = Tensor::zeros(shape_, data_.dtype(), data_.device(), MemCategory::kGradients);
  discarded_ = false;
}

void Parameter::zero_grad() {
  if (grad_.defined()) grad_.zero_();
  discarded_ = false;
  contributions_ = 0;
}

void Parameter::discard_grad() {
  discarded_ = true;
  contributions_ = 0;
}

void Parameter::settle_grad() const {
  if (!discarded_) return;
  if (grad_.defined()) grad_.zero_();
  discarded_ = false;
}

float Parameter::begin_grad_write() {
  if (!grad_.defined()) {
    allocate_grad();  // zeroed: adding to it is overwriting
    return 1.f;
  }
  const float beta = discarded_ ? 0.f : 1.f;
  discarded_ = false;
  return beta;
}

void Parameter::mark_grad_ready() {
  if (++contributions_ < uses_) return;
  contributions_ = 0;
  if (hook_) hook_(*this);
}

}  // namespace ht::nn
