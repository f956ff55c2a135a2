// The dtype rules of the compute ops (matmul, the element-wise ops, LayerNorm,
// RMSNorm, RoPE, SiLU and SwiGLU, attention, embedding, cross-entropy, MSE,
// reduce and masked_mean, index_select, dropout): written here once, referred
// to by every op header. The precision ops (cast.h) and optimizer updates
// have their own rules, stated in their headers.
#pragma once

#include "ht/core/dtype.h"

namespace ht::ops {

// Mixed precision: f16 and bf16 storage, f32 arithmetic.
//
// - One compute dtype per call. Activations and their gradients (x, y, qkv,
//   out, logits, dlogits, dout, dx, dqkv, ...) and parameters and their
//   gradients (matmul's A, B, C; bias and dbias; LayerNorm weight, bias, dw,
//   db; wte, wpe, dwte, dwpe) are all f32, all f16 or all bf16. A mix throws
//   kDTypeMismatch naming two tensors that differ; i32 or another non-float
//   dtype among them throws kDTypeMismatch too.
// - Statistics stay f32 whatever the compute dtype: LayerNorm mean and rstd;
//   RMSNorm rstd; attention lse; cross-entropy losses, lse and target_logit;
//   the MSE loss; the RoPE table. Token ids, targets, attention key masks,
//   masked_mean masks and index_select indices are i32.
// - Arithmetic is f32 inside. Each output element is rounded once to its dtype
//   (round to nearest, ties to even). Outputs that accumulate (matmul with
//   beta != 0, bias_add's y, bias_grad's dbias, LayerNorm dw and db, embedding
//   dwte and dwpe, scale's x) read the stored 16-bit value, add in f32 and
//   round once.
// - f32 calls are unaffected by all of this: the same code, bits and speed.
//
// Cost. The CPU has no 16-bit arithmetic and CUDA kernels other than cuBLAS
// are f32, so most 16-bit calls run the op's f32 driver on f32 copies of the
// call's 16-bit tensors and round the outputs back: temporary f32 buffers of
// those tensors' sizes for the length of the call, and two conversions per
// element (F16C instructions on CPUs that have them). That is every op on
// CUDA except matmul, whose 16-bit operands go to cuBLAS as they are (f32
// compute, tensor cores), and on the CPU matmul (sgemm), bias_add, bias_grad,
// LayerNorm, attention and embedding, and the newer ops (RMSNorm, RoPE, SiLU,
// SwiGLU, MSE, reduce, masked_mean, index_select, mul, dropout). The CPU's
// add, scale, GELU and cross-entropy convert block by block or row by row
// themselves, with no tensor-sized temporaries. 16-bit calls on the CPU are
// therefore slower than f32 ones (one core: matmul 1.0-1.15x the f32 time,
// GELU 1.2-1.3x, LayerNorm 1.3-1.5x; docs/design.md); what 16-bit saves is
// the memory of tensors kept between calls (activations saved for backward,
// parameters, gradients).

/// Whether `dtype` can be the compute dtype of a compute op: f32, f16 or bf16.
constexpr bool is_compute_dtype(DType dtype) { return is_floating(dtype); }

}  // namespace ht::ops
