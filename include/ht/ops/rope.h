// Rotary position embeddings (RoPE) in the "rotate half" convention of
// GPT-NeoX and Hugging Face Llama. A head of dimension D is split into halves;
// pair i in [0, D/2) of the head at position t is rotated by the angle
// t * inv_freq[i]:
//   y[i]       = x[i] cos - x[i + D/2] sin
//   y[i + D/2] = x[i + D/2] cos + x[i] sin
//
// x, y, dy and dx share one compute dtype, f32, f16 or bf16 (ht/ops/
// compute_dtype.h); the table is f32 in every case. Synchronous on CPU; on
// CUDA enqueued on the current stream.
#pragma once

#include <cstdint>

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// The (cos, sin) table of positions [0, max_positions): an f32 tensor
/// (max_positions, head_dim / 2, 2) on `device` (MemCategory::kOther), which
/// a model computes once and passes to every rope_forward / rope_backward.
///
/// Computed as PyTorch computes it in float32 (Hugging Face's
/// LlamaRotaryEmbedding): inv_freq = 1 / theta ** (arange(0, D, 2) / D), with
/// the exponent 2i / D an f32 division, the power rounded to f32 and the
/// reciprocal an f32 division; angle = float(t) * inv_freq, one f32
/// multiplication; cos and sin of that f32 angle rounded to f32 (evaluated in
/// double, so correctly rounded; PyTorch's f32 cos and sin agree to an ulp).
/// Llama uses theta = 10000 (Llama 1 and 2) or 500000 (Llama 3).
///
/// head_dim must be even and positive, theta positive and finite,
/// max_positions >= 0; otherwise throws kInvalidArgument. Synchronous.
Tensor rope_table(std::int64_t max_positions, std::int64_t head_dim, float theta, Device device = Device::cpu());

/// Llama 3.1's frequency scaling ("rope_type": "llama3" in Hugging Face's
/// rope_scaling), which stretches a model trained on
/// original_max_positions to a longer context: with wavelength w = 2 pi /
/// inv_freq, a frequency of w < L / high_freq_factor is kept, one of
/// w > L / low_freq_factor divided by `factor`, and one between them
/// interpolated: (1 - s) inv_freq / factor + s inv_freq with
/// s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor),
/// L = original_max_positions; each step in f32 as PyTorch's float32
/// tensors compute transformers' _compute_llama3_parameters. factor 0: none.
struct RopeScaling {
  float factor = 0.f;
  float low_freq_factor = 1.f;
  float high_freq_factor = 4.f;
  std::int64_t original_max_positions = 8192;
  bool enabled() const { return factor != 0.f; }
  friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
};

/// The table with `scaling` applied to inv_freq (the one above when it is
/// not enabled). Throws kInvalidArgument for a factor other than 0 below
/// 1, low_freq_factor <= 0 or >= high_freq_factor, or
/// original_max_positions <= 0.
Tensor rope_table(std::int64_t max_positions, std::int64_t head_dim, float theta, const RopeScaling& scaling,
                  Device device = Device::cpu());

/// y (B, T, H*D) = x rotated per head, row t of each batch entry at position
/// t; x is (B, T, H*D) with H = n_head and D = head_dim of the table
/// (max_positions >= T, D / 2, 2). `y` may alias `x`.
void rope_forward(const Tensor& x, const Tensor& table, int n_head, Tensor& y);
/// dx = the inverse rotation of dy (the rotation is orthogonal: its
/// transpose is the rotation by minus the angle). `dx` may alias `dy`.
void rope_backward(const Tensor& dy, const Tensor& table, int n_head, Tensor& dx);

}  // namespace ht::ops
