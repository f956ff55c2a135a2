// ht::nn::Linear.
#include "ht/nn/linear.h"

#include <cmath>

#include "ht/ops/elementwise.h"
#include "ht/ops/matmul.h"
#include "weight_grad.h"

namespace ht::nn {
namespace {

ParamLayout split_layout(const TensorParallel& tp, int dim, int parts) {
  if (tp.size() == 1) return {};
  return {.tp_split_dim = dim, .tp_rank = tp.rank(), .tp_size = tp.size(), .tp_parts = parts};
}

}  // namespace

Linear::Linear(std::string name, std::int64_t in_features, std::int64_t out_features, bool bias, Device device,
               TensorParallel tp, LinearSplit split, int parts)
    : Module(std::move(name)), in_(in_features), out_(out_features), tp_(tp), split_(split) {
  HT_CHECK(in_features > 0 && out_features > 0, ErrorKind::kConfig,
           "Linear '{}': feature counts must be positive, got in={} out={}", this->name(), in_features, out_features);
  if (split_ == LinearSplit::kNone || tp_.size() == 1) {
    split_ = LinearSplit::kNone;
    tp_ = {};
  }
  const bool column = split_ == LinearSplit::kColumn, row = split_ == LinearSplit::kRow;
  // PyTorch's nn.Linear defaults: weight and bias from U(-1/sqrt(in), 1/sqrt(in)).
  const float bound = 1.f / std::sqrt(float(in_));
  weight_ = &add_parameter("weight", {out_, in_}, /*weight_decay=*/true, device,
                           column ? split_layout(tp_, 0, parts) : row ? split_layout(tp_, 1, 1) : ParamLayout{},
                           Init::kaiming_uniform(std::sqrt(5.f)));
  if (bias) bias_ = &add_parameter("bias", {out_}, /*weight_decay=*/false, device,
                                   column ? split_layout(tp_, 0, parts) : ParamLayout{}, Init::uniform(-bound, bound));
}

void Linear::set_bias_grad_by_caller(bool by_caller) {
  HT_CHECK(!by_caller || bias_, ErrorKind::kInvalidArgument,
           "Linear '{}' has no bias whose gradient the caller could compute", name());
  bias_grad_by_caller_ = by_caller;
}

Tensor Linear::forward_impl(Context& ctx, const Tensor& x) {
  const std::int64_t in_local = weight_->shape()[1], out_local = weight_->shape()[0];
  HT_CHECK(x.ndim() >= 1 && x.size(-1) == in_local, ErrorKind::kShapeMismatch,
           "Linear '{}': input {} must end in {} features", name(), shape_str(x.shape()), in_local);
  Shape out_shape = x.shape();
  out_shape.back() = out_local;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor y2 = y.flatten_rows();
  // The bias first, then y += x W^T: OpenBLAS zeroes C in a pass of its own
  // for beta 0, so this saves that pass and bias_add's (2-3 % of a small
  // GPT's CPU step; docs/benchmarks.md). A row-parallel layer sums partial
  // products over the group first and adds the bias once, after.
  const bool bias_first = bias_ && split_ != LinearSplit::kRow;
  if (bias_first) ops::bias_fill(y2, bias_->data());
  ops::matmul(x.flatten_rows(), weight_->data(), y2, {.trans_b = true, .beta = bias_first ? 1.f : 0.f});
  if (split_ == LinearSplit::kRow) {
    tp_.all_reduce_sum(y);  // partial sums over the input slices
    if (bias_) ops::bias_add(y2, bias_->data());
  }
  if (!input_saved_by_caller_) ctx.save(this, {x});
  return y;
}

Tensor Linear::backward_impl(Context& ctx, const Tensor& dy) {
  const Tensor& x = ctx.saved(this).at(0);
  const Tensor x2 = x.flatten_rows();
  const Tensor dy2 = dy.flatten_rows();
  detail::matmul_weight_grad(ctx, *weight_, dy2, x2);
  if (bias_ && !bias_grad_by_caller_) {
    bias_->allocate_grad();
    ops::bias_grad(dy2, bias_->grad());
    bias_->mark_grad_ready();
  }
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor dx2 = dx.flatten_rows();
  ops::matmul(dy2, weight_->data(), dx2);
  if (split_ == LinearSplit::kColumn) tp_.all_reduce_sum(dx);  // each rank saw only its outputs
  return dx;
}

}  // namespace ht::nn
