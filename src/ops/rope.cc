// RoPE: the (cos, sin) table, computed on the host as PyTorch computes it in
// float32, and validation and dispatch of the rotation; f16 and bf16 calls
// run the f32 drivers through F32Staging (the table is f32 always).
#include "ht/ops/rope.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {

// Checks x (B, T, n_head * D), the table (T_max >= T, D / 2, 2) f32 and the
// output's shape and dtype; `x_name`/`y_name` are the caller's argument names.
void check_rope(const char* op, const char* x_name, const Tensor& x, const Tensor& table, int n_head,
                const char* y_name, const Tensor& y) {
  detail::check_ndim(op, x_name, x, 3);
  HT_CHECK(n_head > 0 && x.size(2) % n_head == 0, ErrorKind::kShapeMismatch,
           "{}: n_head={} must be positive and divide the last dimension of '{}' {}", op, n_head, x_name,
           shape_str(x.shape()));
  const std::int64_t d = x.size(2) / n_head;
  HT_CHECK(d % 2 == 0, ErrorKind::kShapeMismatch,
           "{}: the head dimension {} of '{}' {} with n_head={} is odd; rotary embeddings rotate pairs (x[i], "
           "x[i + D/2]), so D must be even",
           op, d, x_name, shape_str(x.shape()), n_head);
  detail::check_compute_dtype(op, {{x_name, &x}, {y_name, &y}});
  detail::check_shape(op, y_name, y, x.shape());
  detail::check_dtype(op, "table", table, DType::kF32);
  detail::check_ndim(op, "table", table, 3);
  HT_CHECK(table.size(1) == d / 2 && table.size(2) == 2, ErrorKind::kShapeMismatch,
           "{}: table {} must be (positions, D/2 = {}, 2) for heads of D = {} ({} {} over n_head={}); build it with "
           "rope_table(max_positions, {}, theta)",
           op, shape_str(table.shape()), d / 2, d, x_name, shape_str(x.shape()), n_head, d);
  HT_CHECK(table.size(0) >= x.size(1), ErrorKind::kShapeMismatch,
           "{}: table {} holds {} positions but the sequence of '{}' {} has {}; build it with rope_table(max_positions "
           ">= {}, ...)",
           op, shape_str(table.shape()), table.size(0), x_name, shape_str(x.shape()), x.size(1), x.size(1));
}

}  // namespace

Tensor rope_table(std::int64_t max_positions, std::int64_t head_dim, float theta, Device device) {
  return rope_table(max_positions, head_dim, theta, RopeScaling{}, device);
}

Tensor rope_table(std::int64_t max_positions, std::int64_t head_dim, float theta, const RopeScaling& scaling,
                  Device device) {
  HT_CHECK_ARG(head_dim > 0 && head_dim % 2 == 0,
               "rope_table: head_dim={} must be positive and even (rotary embeddings rotate pairs of channels)",
               head_dim);
  HT_CHECK_ARG(std::isfinite(theta) && theta > 0.f, "rope_table: theta={} must be positive and finite (Llama: 10000 "
               "or 500000)", theta);
  HT_CHECK_ARG(max_positions >= 0, "rope_table: max_positions={} must not be negative", max_positions);
  const std::int64_t half = head_dim / 2;
  // inv_freq[i] = 1 / theta ** (2i / D), each step rounded to f32 as PyTorch's
  // float32 tensors round it: the exponent (an f32 division), the power (here
  // computed in double and rounded once), the reciprocal (an f32 division).
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    const float exponent = float(2 * i) / float(head_dim);
    const float power = float(std::pow(double(theta), double(exponent)));
    inv_freq[std::size_t(i)] = 1.f / power;
  }
  if (scaling.enabled()) {
    HT_CHECK_ARG(scaling.factor >= 1.f && scaling.low_freq_factor > 0.f &&
                     scaling.low_freq_factor < scaling.high_freq_factor && scaling.original_max_positions > 0,
                 "rope_table: llama3 scaling factor {}, low_freq_factor {}, high_freq_factor {}, "
                 "original_max_positions {}: need factor >= 1, 0 < low < high and a positive original context",
                 scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor, scaling.original_max_positions);
    // transformers' _compute_llama3_parameters on float32 tensors: a Python
    // number meets an f32 tensor as an f32 (2 pi / x is x's reciprocal
    // times 2 pi; comparisons take the bound rounded to f32).
    const double context = double(scaling.original_max_positions);
    const float low_wavelen = float(context / scaling.low_freq_factor);
    const float high_wavelen = float(context / scaling.high_freq_factor);
    const float band = float(double(scaling.high_freq_factor) - double(scaling.low_freq_factor));
    for (float& f : inv_freq) {
      const float wavelen = (1.f / f) * float(2.0 * std::numbers::pi);
      if (wavelen > low_wavelen) {  // low frequencies: divided
        f = f / scaling.factor;
      } else if (wavelen >= high_wavelen) {  // between the bands: interpolated
        const float smooth = ((1.f / wavelen) * float(context) - scaling.low_freq_factor) / band;
        f = (1.f - smooth) * f / scaling.factor + smooth * f;
      }  // high frequencies: kept
    }
  }
  Tensor host = Tensor::empty({max_positions, half, 2}, DType::kF32, Device::cpu(), MemCategory::kOther);
  float* p = host.data<float>();
  for (std::int64_t t = 0; t < max_positions; ++t)
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = float(t) * inv_freq[std::size_t(i)];  // one f32 product, as the f32 matmul of HF
      p[(t * half + i) * 2] = float(std::cos(double(angle)));
      p[(t * half + i) * 2 + 1] = float(std::sin(double(angle)));
    }
  return device.is_cpu() ? host : host.to(device);
}

void rope_forward(const Tensor& x, const Tensor& table, int n_head, Tensor& y) {
  const char* op = "rope_forward";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"table", &table}, {"y", &y}});
  check_rope(op, "x", x, table, n_head, "y", y);
  detail::F32Staging s;
  HT_DISPATCH(dev, rope, s.in(x), table, n_head, false, s.out(y, detail::Staged::kOverwrite));
  s.commit();
}

void rope_backward(const Tensor& dy, const Tensor& table, int n_head, Tensor& dx) {
  const char* op = "rope_backward";
  const Device dev = detail::check_same_device(op, {{"dy", &dy}, {"table", &table}, {"dx", &dx}});
  check_rope(op, "dy", dy, table, n_head, "dx", dx);
  detail::F32Staging s;
  HT_DISPATCH(dev, rope, s.in(dy), table, n_head, true, s.out(dx, detail::Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
