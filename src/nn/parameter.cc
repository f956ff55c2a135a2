// ht::nn::Parameter.
#include "ht/nn/parameter.h"

namespace ht::nn {

Parameter::Parameter(std::string name, Shape full_shape, Tensor data, bool weight_decay)
    : name_(std::move(name)), full_shape_(std::move(full_shape)), data_(std::move(data)), weight_decay_(weight_decay) {}

void Parameter::set_data(Tensor t) {
  HT_CHECK(!data_.defined() || t.numel() == data_.numel(), ErrorKind::kShapeMismatch,
           "parameter {}: new storage {} does not match current shape {}", name_, shape_str(t.shape()),
           shape_str(data_.shape()));
  data_ = std::move(t);
}

void Parameter::set_grad(Tensor t) {
  HT_CHECK(t.numel() == data_.numel(), ErrorKind::kShapeMismatch,
           "parameter {}: gradient {} does not match data {}", name_, shape_str(t.shape()), shape_str(data_.shape()));
  grad_ = std::move(t);
}

void Parameter::allocate_grad() {
  if (grad_.defined()) return;
  grad_ = Tensor::zeros(data_.shape(), DType::kF32, data_.device(), MemCategory::kGradients);
}

void Parameter::zero_grad() {
  if (grad_.defined()) grad_.zero_();
  contributions_ = 0;
}

void Parameter::mark_grad_ready() {
  if (++contributions_ < uses_) return;
  contributions_ = 0;
  if (hook_) hook_(*this);
}

}  // namespace ht::nn
