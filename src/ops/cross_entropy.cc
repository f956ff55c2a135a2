// Cross-entropy: validation and dispatch. Targets are range-checked by the
// drivers; the vocabulary shard is checked here and reaches them resolved.
// f16 and bf16 logits: the CPU driver widens them row by row itself; CUDA runs
// the f32 kernels through F32Staging. The per-row statistics (losses, lse,
// target_logit) are f32 whatever the logits' dtype.
#include "ht/ops/cross_entropy.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {

void check_common(const char* op, const Tensor& logits, const Tensor& targets, const Tensor& lse) {
  detail::check_ndim(op, "logits", logits, 2);
  detail::check_compute_dtype(op, {{"logits", &logits}});
  detail::check_dtype(op, "targets", targets, DType::kI32);
  detail::check_dtype(op, "lse", lse, DType::kF32);
  detail::check_shape(op, "targets", targets, {logits.size(0)});
  detail::check_shape(op, "lse", lse, {logits.size(0)});
}

void check_options(const char* op, const CrossEntropyOptions& o) {
  HT_CHECK(o.label_smoothing >= 0.f && o.label_smoothing < 1.f, ErrorKind::kInvalidArgument,
           "{}: label_smoothing {} must lie in [0, 1)", op, o.label_smoothing);
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse,
                           const CrossEntropyOptions& options) {
  const char* op = "cross_entropy_forward";
  const Device dev = detail::check_same_device(
      op, {{"logits", &logits}, {"targets", &targets}, {"losses", &losses}, {"lse", &lse}});
  check_common(op, logits, targets, lse);
  check_options(op, options);
  detail::check_dtype(op, "losses", losses, DType::kF32);
  detail::check_shape(op, "losses", losses, {logits.size(0)});
  detail::F32Staging s(/*native=*/dev.is_cpu());
  HT_DISPATCH(dev, cross_entropy_forward, s.in(logits), targets, losses, lse, options);
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
  detail::F32Staging s(/*native=*/dev.is_cpu());
  HT_DISPATCH(dev, cross_entropy_shard_forward, s.in(logits), targets, shard, lse, target_logit);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits, VocabShard shard, const CrossEntropyOptions& options) {
  const char* op = "cross_entropy_backward";
  const Device dev = detail::check_same_device(
      op, {{"logits", &logits}, {"targets", &targets}, {"lse", &lse}, {"dlogits", &dlogits}});
  check_common(op, logits, targets, lse);
  check_options(op, options);
  detail::check_compute_dtype(op, {{"logits", &logits}, {"dlogits", &dlogits}});
  detail::check_shape(op, "dlogits", dlogits, logits.shape());
  shard = detail::check_vocab_shard(op, "logits", logits.size(1), shard);
  detail::F32Staging s(/*native=*/dev.is_cpu());
  HT_DISPATCH(dev, cross_entropy_backward, s.in(logits), targets, lse, dloss,
              s.out(dlogits, detail::Staged::kOverwrite), shard, options);
  s.commit();
}

}  // namespace ht::ops
