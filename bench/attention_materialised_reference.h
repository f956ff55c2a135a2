// The benchmark's peer for flash attention: causal multi-head attention as
// hypertrain computed it before (commit e7e9dcf), with the (B, H, T, T)
// softmax probabilities materialised and saved for backward. Kept here, not
// in the library, only so that ops_bench can time it and measure its saved
// bytes side by side with ht::ops::attention_forward/backward. Host, f32,
// packed qkv (B, T, 3C) only.
#pragma once

#include "ht/core/tensor.h"

namespace ht::bench {

/// out (B, T, C) and probs (B, H, T, T) f32 from qkv (B, T, 3C), causal.
void materialised_attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs);
/// dqkv (B, T, 3C) overwritten from dout (B, T, C), qkv and the forward's probs.
void materialised_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head,
                                     Tensor& dqkv);

}  // namespace ht::bench
