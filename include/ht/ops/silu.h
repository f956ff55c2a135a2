// SiLU (swish) and SwiGLU, the gated activation of Llama's MLP. Outputs are
// overwritten. Every tensor of a call is f32, or all f16, or all bf16
// (ht/ops/compute_dtype.h). Synchronous on CPU; on CUDA enqueued on the
// current stream.
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// y = silu(x) = x * sigmoid(x), element-wise, x and y of equal element
/// count. `y` may alias `x`.
void silu_forward(const Tensor& x, Tensor& y);
/// dx = silu'(x) * dy = dy * s * (1 + x * (1 - s)) with s = sigmoid(x).
/// `dx` may alias `dy`.
void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);

/// out (..., F) = silu(gate) * up, where gate_up (..., 2F) holds gate in
/// columns [0, F) and up in columns [F, 2F) of its last dimension: one Linear
/// with the gate and up projections packed side by side (under tensor
/// parallelism each rank's columns are [gate_r | up_r]). out has gate_up's
/// shape with the last dimension halved; F may be 0.
void swiglu_forward(const Tensor& gate_up, Tensor& out);
/// dgate_up (..., 2F), overwritten: columns [0, F) the gradient of gate,
/// dout * up * silu'(gate); columns [F, 2F) that of up, dout * silu(gate).
/// `dgate_up` may alias `gate_up`.
void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& dgate_up);

}  // namespace ht::ops
