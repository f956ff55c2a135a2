// Mean-squared error: validation and dispatch; f16 and bf16 calls run the f32
// drivers through F32Staging (the loss is f32 either way).
#include "ht/ops/mse.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {

void check_pair(const char* op, const Tensor& pred, const Tensor& target) {
  detail::check_shape(op, "target", target, pred.shape());
  HT_CHECK_ARG(pred.numel() > 0, "{}: pred {} is empty; the mean of no squared errors is undefined", op,
               shape_str(pred.shape()));
}

}  // namespace

void mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss) {
  const char* op = "mse_forward";
  const Device dev = detail::check_same_device(op, {{"pred", &pred}, {"target", &target}, {"loss", &loss}});
  detail::check_compute_dtype(op, {{"pred", &pred}, {"target", &target}});
  detail::check_scalar_f32(op, "loss", loss);
  check_pair(op, pred, target);
  detail::F32Staging s;
  HT_DISPATCH(dev, mse_forward, s.in(pred), s.in(target), loss);
}

void mse_backward(const Tensor& pred, const Tensor& target, float dloss, Tensor& dpred) {
  const char* op = "mse_backward";
  const Device dev = detail::check_same_device(op, {{"pred", &pred}, {"target", &target}, {"dpred", &dpred}});
  detail::check_compute_dtype(op, {{"pred", &pred}, {"target", &target}, {"dpred", &dpred}});
  check_pair(op, pred, target);
  detail::check_shape(op, "dpred", dpred, pred.shape());
  detail::F32Staging s;
  HT_DISPATCH(dev, mse_backward, s.in(pred), s.in(target), dloss, s.out(dpred, detail::Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
