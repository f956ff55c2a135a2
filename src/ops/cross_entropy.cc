// Cross-entropy: validation and dispatch. Targets are range-checked by the
// drivers; the vocabulary shard is checked here and reaches them resolved.
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

void cross_entropy_shard_forward(const Tensor& logits, const Tensor& targets, VocabShard shard, Tensor& lse,
                                 Tensor& target_logit) {
  const char* op = "cross_entropy_shard_forward";
  const Device dev = detail::check_same_device(
      op, {{"logits", &logits}, {"targets", &targets}, {"lse", &lse}, {"target_logit", &target_logit}});
  check_common(op, logits, targets, lse);
  detail::check_dtype(op, "target_logit", target_logit, DType::kF32);
  detail::check_shape(op, "target_logit", target_logit, {logits.size(0)});
  shard = detail::check_vocab_shard(op, "logits", logits.size(1), shard);
  HT_DISPATCH(dev, cross_entropy_shard_forward, logits, targets, shard, lse, target_logit);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits, VocabShard shard) {
  const char* op = "cross_entropy_backward";
  const Device dev = detail::check_same_device(
      op, {{"logits", &logits}, {"targets", &targets}, {"lse", &lse}, {"dlogits", &dlogits}});
  check_common(op, logits, targets, lse);
  detail::check_dtype(op, "dlogits", dlogits, DType::kF32);
  detail::check_shape(op, "dlogits", dlogits, logits.shape());
  shard = detail::check_vocab_shard(op, "logits", logits.size(1), shard);
  HT_DISPATCH(dev, cross_entropy_backward, logits, targets, lse, dloss, dlogits, shard);
}

}  // namespace ht::ops
