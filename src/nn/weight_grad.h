// The weight gradient of a layer y = x W^T, dW (+)= dy^T x, run now or kept
// for later by the context (Context::weight_grad: zero-bubble pipelines run
// it after the input's gradient has gone to the previous stage). Shared by
// Linear and LMHead.
#pragma once

#include "ht/nn/context.h"
#include "ht/nn/parameter.h"
#include "ht/ops/matmul.h"

namespace ht::nn::detail {

/// `dy2` (rows, out) and `x2` (rows, in): the output's gradient and the
/// input, flattened to rows. The first contribution of a step overwrites a
/// discarded gradient (GEMM beta 0), later ones add.
inline void matmul_weight_grad(Context& ctx, Parameter& w, const Tensor& dy2, const Tensor& x2) {
  ctx.weight_grad({dy2, x2}, [&w](const std::vector<Tensor>& t) {
    const float beta = w.begin_grad_write();
    ops::matmul(t[0], t[1], w.raw_grad(), {.trans_a = true, .beta = beta});
    w.mark_grad_ready();
  });
}

}  // namespace ht::nn::detail
