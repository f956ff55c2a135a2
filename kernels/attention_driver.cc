// CUDA softmax self-attention, one driver for both public forms (packed qkv,
// and separate q, k, v with grouped-query heads and masks; see
// ops/attention_views.h): cuBLAS GEMMs on strided views of the inputs, one
// head at a time, around the attention softmax kernels.
//
// Q of query head h and K, V of its key/value head g = h / group are columns
// [h*D, (h+1)*D) and [g*D, (g+1)*D) of rows with strides ld_q, ld_k, ld_v.
// Within one head, batch entry b starts t*ld elements after entry b-1, so a
// strided-batched GEMM over the batch reads them in place; no permuted copies
// of Q, K, V are made. Scores are written straight into probs (B, H, T, T),
// where head h of batch b starts at (b*H + h)*T*T: again one stride per head.
// Backward needs dP/dS for one head at a time: a (B, T, T) scratch tensor,
// reused for every head (the work is ordered on one stream), instead of a
// second (B, H, T, T) buffer. The query heads of a key/value head run in
// order, the first overwriting dK and dV and the others adding to them
// (beta 1), so the sums have a fixed order.
#include <cmath>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "gemm.h"
#include "launch.h"
#include "ops/attention_views.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {
namespace {

using detail::AttentionShape;
using detail::QkvViews;
using ht::cuda::GemmOperand;

void forward(const AttentionShape& s, const QkvViews<const float>& in, const std::int32_t* key_mask, float* out,
             float* probs, Device device) {
  if (s.batch * s.t * s.head_dim == 0) return;
  const ht::cuda::DeviceGuard guard(device);
  const std::int64_t t = s.t, d = s.head_dim, tt = t * t, ld_out = s.q_width();
  const float scale = 1.f / std::sqrt(float(d));
  for (std::int64_t h = 0; h < s.n_head; ++h) {
    const std::int64_t g = h / s.group();
    // S = scale * Q K^T into probs[:, h] (masked entries are computed, then zeroed by the softmax).
    ht::cuda::gemm(DType::kF32, t, t, d, scale, GemmOperand{in.q + h * d, in.ld_q, t * in.ld_q, false},
                   GemmOperand{in.k + g * d, in.ld_k, t * in.ld_k, true}, 0.f, probs + h * tt, t, s.n_head * tt,
                   s.batch);
  }
  HT_CUDA_CHECK(ht::cuda::launch_attention_softmax(probs, s.batch * s.n_head * t, t, s.n_head, s.causal, key_mask,
                                                   ht::cuda::current_stream()));
  for (std::int64_t h = 0; h < s.n_head; ++h) {
    const std::int64_t g = h / s.group();
    // O = P V into head h's columns of out (B, T, H*D).
    ht::cuda::gemm(DType::kF32, t, d, t, 1.f, GemmOperand{probs + h * tt, t, s.n_head * tt, false},
                   GemmOperand{in.v + g * d, in.ld_v, t * in.ld_v, false}, 0.f, out + h * d, ld_out, t * ld_out,
                   s.batch);
  }
}

void backward(const AttentionShape& s, const float* dout, const QkvViews<const float>& in, const float* probs,
              const QkvViews<float>& grad, Device device) {
  if (s.batch * s.t * s.head_dim == 0) return;
  const ht::cuda::DeviceGuard guard(device);
  const std::int64_t t = s.t, d = s.head_dim, tt = t * t, ld_out = s.q_width();
  const float scale = 1.f / std::sqrt(float(d));
  Tensor ds_scratch = Tensor::empty({s.batch, t, t}, DType::kF32, device, MemCategory::kActivations);
  float* ds = ds_scratch.data<float>();
  const cudaStream_t stream = ht::cuda::current_stream();
  for (std::int64_t h = 0; h < s.n_head; ++h) {
    const std::int64_t g = h / s.group();
    const float beta = h % s.group() == 0 ? 0.f : 1.f;  // the group's first query head overwrites dK, dV
    const GemmOperand q{in.q + h * d, in.ld_q, t * in.ld_q, false};
    const GemmOperand k{in.k + g * d, in.ld_k, t * in.ld_k, false};
    const GemmOperand v_t{in.v + g * d, in.ld_v, t * in.ld_v, true};
    const GemmOperand p_t{probs + h * tt, t, s.n_head * tt, true};  // P, used transposed
    const GemmOperand go{dout + h * d, ld_out, t * ld_out, false};
    // dP = dO V^T ; dV (+)= P^T dO
    ht::cuda::gemm(DType::kF32, t, t, d, 1.f, go, v_t, 0.f, ds, t, tt, s.batch);
    ht::cuda::gemm(DType::kF32, t, d, t, 1.f, p_t, go, beta, grad.v + g * d, grad.ld_v, t * grad.ld_v, s.batch);
    // dS = softmax_grad(P, dP) * scale on the visible keys, zero after.
    HT_CUDA_CHECK(
        ht::cuda::launch_attention_softmax_backward(probs, ds, s.batch, s.n_head, h, t, s.causal, scale, stream));
    // dQ = dS K ; dK (+)= dS^T Q
    ht::cuda::gemm(DType::kF32, t, d, t, 1.f, GemmOperand{ds, t, tt, false}, k, 0.f, grad.q + h * d, grad.ld_q,
                   t * grad.ld_q, s.batch);
    ht::cuda::gemm(DType::kF32, t, d, t, 1.f, GemmOperand{ds, t, tt, true}, q, beta, grad.k + g * d, grad.ld_k,
                   t * grad.ld_k, s.batch);
  }
  // ds_scratch is released here. Tensor storage is freed with cudaFree, which
  // waits for the device to finish the work above; an allocator that frees
  // without waiting would have to be stream-ordered for this to stay safe.
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs) {
  const AttentionShape s = detail::packed_attention_shape(qkv, n_head);
  forward(s, detail::packed_views<const float>(qkv.data<float>(), s.q_width()), nullptr, out.data<float>(), probs.data<float>(),
          qkv.device());
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv) {
  const AttentionShape s = detail::packed_attention_shape(qkv, n_head);
  backward(s, dout.data<float>(), detail::packed_views<const float>(qkv.data<float>(), s.q_width()), probs.data<float>(),
           detail::packed_views(dqkv.data<float>(), s.q_width()), qkv.device());
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                       const Tensor& key_mask, Tensor& out, Tensor& probs) {
  const AttentionShape s = detail::attention_shape(q, o);
  forward(s, detail::separate_views<const float>(q.data<float>(), k.data<float>(), v.data<float>(), s),
          key_mask.defined() ? key_mask.data<std::int32_t>() : nullptr, out.data<float>(), probs.data<float>(),
          q.device());
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const AttentionOptions& o, Tensor& dq, Tensor& dk, Tensor& dv) {
  const AttentionShape s = detail::attention_shape(q, o);
  backward(s, dout.data<float>(), detail::separate_views<const float>(q.data<float>(), k.data<float>(), v.data<float>(), s),
           probs.data<float>(), detail::separate_views(dq.data<float>(), dk.data<float>(), dv.data<float>(), s),
           q.device());
}

}  // namespace ht::ops::cuda
