// SiLU and SwiGLU: validation and dispatch; f16 and bf16 calls run the f32
// drivers through F32Staging (ht/ops/compute_dtype.h).
#include "ht/ops/silu.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {

// Checks gate_up (..., 2F) against the (..., F) tensor `name`.
void check_swiglu(const char* op, const Tensor& gate_up, const char* name, const Tensor& half) {
  HT_CHECK(gate_up.ndim() >= 1 && gate_up.size(-1) % 2 == 0, ErrorKind::kShapeMismatch,
           "{}: the last dimension of gate_up {} must be even: [gate | up], F columns each", op,
           shape_str(gate_up.shape()));
  Shape want = gate_up.shape();
  want.back() /= 2;
  HT_CHECK(half.shape() == want, ErrorKind::kShapeMismatch,
           "{}: '{}' must have shape {} (gate_up {} with the last dimension halved), got {}", op, name,
           shape_str(want), shape_str(gate_up.shape()), shape_str(half.shape()));
}

}  // namespace

using detail::F32Staging;
using detail::Staged;

void silu_forward(const Tensor& x, Tensor& y) {
  const char* op = "silu_forward";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"y", &y}});
  detail::check_compute_dtype(op, {{"x", &x}, {"y", &y}});
  detail::check_numel(op, "y", y, x.numel());
  F32Staging s;
  HT_DISPATCH(dev, silu_forward, s.in(x), s.out(y, Staged::kOverwrite));
  s.commit();
}

void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const char* op = "silu_backward";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  detail::check_compute_dtype(op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  detail::check_numel(op, "dy", dy, x.numel());
  detail::check_numel(op, "dx", dx, x.numel());
  F32Staging s;
  HT_DISPATCH(dev, silu_backward, s.in(x), s.in(dy), s.out(dx, Staged::kOverwrite));
  s.commit();
}

void swiglu_forward(const Tensor& gate_up, Tensor& out) {
  const char* op = "swiglu_forward";
  const Device dev = detail::check_same_device(op, {{"gate_up", &gate_up}, {"out", &out}});
  detail::check_compute_dtype(op, {{"gate_up", &gate_up}, {"out", &out}});
  check_swiglu(op, gate_up, "out", out);
  F32Staging s;
  HT_DISPATCH(dev, swiglu_forward, s.in(gate_up), s.out(out, Staged::kOverwrite));
  s.commit();
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& dgate_up) {
  const char* op = "swiglu_backward";
  const Device dev =
      detail::check_same_device(op, {{"dout", &dout}, {"gate_up", &gate_up}, {"dgate_up", &dgate_up}});
  detail::check_compute_dtype(op, {{"dout", &dout}, {"gate_up", &gate_up}, {"dgate_up", &dgate_up}});
  check_swiglu(op, gate_up, "dout", dout);
  detail::check_shape(op, "dgate_up", dgate_up, gate_up.shape());
  F32Staging s;
  HT_DISPATCH(dev, swiglu_backward, s.in(dout), s.in(gate_up), s.out(dgate_up, Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
