// Fused optimizer updates over flat buffers (a whole parameter, or a ZeRO shard).
#pragma once

#include <cstdint>

#include "ht/core/tensor.h"

namespace ht::ops {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.f;  // decoupled: p -= lr * wd * p
  std::int64_t step = 1;     // 1-based step count, for bias correction
  float grad_scale = 1.f;    // multiplies the gradient first (e.g. 1 / loss scale)
};

/// One AdamW step, as torch.optim.AdamW: param, m, v f32; grad f32, f16 or bf16;
/// all the same element count and device.
void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h);

struct SgdHyper {
  float lr = 1e-2f;
  float momentum = 0.f;
  float weight_decay = 0.f;  // coupled (added to the gradient), as torch.optim.SGD
  bool nesterov = false;
  bool first_step = false;  // momentum buffer takes the gradient as is on the first step
  float grad_scale = 1.f;
};

/// One SGD step with momentum, as torch.optim.SGD (dampening 0).
/// `momentum_buf` may be undefined when momentum is 0.
void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdHyper& h);

}  // namespace ht::ops
