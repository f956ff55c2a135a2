// Causal self-attention: validation and dispatch; f16 and bf16 calls run the
// f32 drivers through F32Staging (probs in the compute dtype too).
#include "ht/ops/attention.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {

// Returns C after checking qkv is (B, T, 3C) with C divisible by n_head.
std::int64_t check_qkv(const char* op, const Tensor& qkv, int n_head) {
  detail::check_ndim(op, "qkv", qkv, 3);
  HT_CHECK(qkv.size(2) % 3 == 0, ErrorKind::kShapeMismatch, "{}: last dimension of qkv {} must be 3*C", op,
           shape_str(qkv.shape()));
  const std::int64_t c = qkv.size(2) / 3;
  HT_CHECK(n_head > 0 && c % n_head == 0, ErrorKind::kShapeMismatch,
           "{}: n_head={} must be positive and divide the channel count C={}", op, n_head, c);
  return c;
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs) {
  const char* op = "attention_forward";
  const Device dev = detail::check_same_device(op, {{"qkv", &qkv}, {"out", &out}, {"probs", &probs}});
  const std::int64_t c = check_qkv(op, qkv, n_head);
  const std::int64_t b = qkv.size(0), t = qkv.size(1);
  detail::check_compute_dtype(op, {{"qkv", &qkv}, {"out", &out}, {"probs", &probs}});
  detail::check_shape(op, "out", out, {b, t, c});
  detail::check_shape(op, "probs", probs, {b, n_head, t, t});
  detail::F32Staging s;
  HT_DISPATCH(dev, attention_forward, s.in(qkv), n_head, s.out(out, detail::Staged::kOverwrite),
              s.out(probs, detail::Staged::kOverwrite));
  s.commit();
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv) {
  const char* op = "attention_backward";
  const Device dev =
      detail::check_same_device(op, {{"dout", &dout}, {"qkv", &qkv}, {"probs", &probs}, {"dqkv", &dqkv}});
  const std::int64_t c = check_qkv(op, qkv, n_head);
  const std::int64_t b = qkv.size(0), t = qkv.size(1);
  detail::check_compute_dtype(op, {{"dout", &dout}, {"qkv", &qkv}, {"probs", &probs}, {"dqkv", &dqkv}});
  detail::check_shape(op, "dout", dout, {b, t, c});
  detail::check_shape(op, "probs", probs, {b, n_head, t, t});
  detail::check_shape(op, "dqkv", dqkv, qkv.shape());
  detail::F32Staging s;
  HT_DISPATCH(dev, attention_backward, s.in(dout), s.in(qkv), s.in(probs), n_head,
              s.out(dqkv, detail::Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
