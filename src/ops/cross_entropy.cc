// Cross-entropy: validation and dispatch. Targets are range-checked by the drivers.
#include "ht/ops/cross_entropy.h"

#include "ops/backend_ops.h"
#include "ops/check.h"

namespace ht::ops {
namespace {

void check_common(const char* op, const Tensor& logits, const Tensor& targets, const Tensor& lse) {
  detail::check_ndim(op, "logits", logits, 2);
  detail::check_dtype(op, "logits", logits, DType::kF32);
  detail::check_dtype(op, "targets", targets, DType::kI32);
  detail::check_dtype(op, "lse", lse, DType::kF32);
  detail::check_shape(op, "targets", targets, {logits.size(0)});
  detail::check_shape(op, "lse", lse, {logits.size(0)});
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse) {
  const char* op = "cross_entropy_forward";
  const Device dev = detail::check_same_device(
      op, {{"logits", &logits}, {"targets", &targets}, {"losses", &losses}, {"lse", &lse}});
  check_common(op, logits, targets, lse);
  detail::check_dtype(op, "losses", losses, DType::kF32);
  detail::check_shape(op, "losses", losses, {logits.size(0)});
  HT_DISPATCH(dev, cross_entropy_forward, logits, targets, losses, lse);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  const Device dev = detail::check_same_device(
      op, {{"logits", &logits}, {"targets", &targets}, {"lse", &lse}, {"dlogits", &dlogits}});
  check_common(op, logits, targets, lse);
  detail::check_dtype(op, "dlogits", dlogits, DType::kF32);
  detail::check_shape(op, "dlogits", dlogits, logits.shape());
  HT_DISPATCH(dev, cross_entropy_backward, logits, targets, lse, dloss, dlogits);
}

}  // namespace ht::ops
