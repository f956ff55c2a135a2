// CUDA causal self-attention: cuBLAS GEMMs on strided views of the packed qkv
// tensor, one head at a time, around the causal softmax kernels.
//
// Q, K and V of head h are the columns [h*hs, (h+1)*hs) of the three C-wide
// thirds of each 3C-wide row, as in the CPU driver. Within one head, batch
// entry b starts t*3C elements after entry b-1, so a strided-batched GEMM over
// the batch reads them in place with leading dimension 3C; no permuted copies
// of Q, K, V are made. Scores are written straight into probs (B, H, T, T),
// where head h of batch b starts at (b*H + h)*T*T: again one stride per head.
// Backward needs dP/dS for one head at a time: a (B, T, T) scratch tensor,
// reused for every head (the work is ordered on one stream), instead of a
// second (B, H, T, T) buffer.
#include <cmath>

#include "core/cuda_check.h"
#include "cuda_context.h"
#include "gemm.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {
namespace {

using ht::cuda::GemmOperand;

struct Dims {
  std::int64_t b, t, c, h, hs;
};

Dims dims_of(const Tensor& qkv, int n_head) {
  const std::int64_t c = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), c, n_head, c / n_head};
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs) {
  const Dims d = dims_of(qkv, n_head);
  if (d.b * d.t * d.c == 0) return;
  const ht::cuda::DeviceGuard guard(qkv.device());
  const float* pqkv = qkv.data<float>();
  float* pout = out.data<float>();
  float* pp = probs.data<float>();
  const float scale = 1.f / std::sqrt(float(d.hs));
  const std::int64_t ld = 3 * d.c, qkv_stride = d.t * ld, tt = d.t * d.t;
  for (std::int64_t h = 0; h < d.h; ++h) {
    const float* q = pqkv + h * d.hs;
    const float* k = q + d.c;
    // S = scale * Q K^T into probs[:, h] (the upper triangle is computed, then masked).
    ht::cuda::gemm(DType::kF32, d.t, d.t, d.hs, scale, GemmOperand{q, ld, qkv_stride, false},
                   GemmOperand{k, ld, qkv_stride, true}, 0.f, pp + h * tt, d.t, d.h * tt, d.b);
  }
  HT_CUDA_CHECK(ht::cuda::launch_causal_softmax(pp, d.b * d.h * d.t, d.t, ht::cuda::current_stream()));
  for (std::int64_t h = 0; h < d.h; ++h) {
    const float* v = pqkv + 2 * d.c + h * d.hs;
    // O = P V into head h's columns of out (B, T, C).
    ht::cuda::gemm(DType::kF32, d.t, d.hs, d.t, 1.f, GemmOperand{pp + h * tt, d.t, d.h * tt, false},
                   GemmOperand{v, ld, qkv_stride, false}, 0.f, pout + h * d.hs, d.c, d.t * d.c, d.b);
  }
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv) {
  const Dims d = dims_of(qkv, n_head);
  if (d.b * d.t * d.c == 0) return;
  const ht::cuda::DeviceGuard guard(qkv.device());
  const float* pqkv = qkv.data<float>();
  const float* pdo = dout.data<float>();
  const float* pp = probs.data<float>();
  float* pdqkv = dqkv.data<float>();
  const float scale = 1.f / std::sqrt(float(d.hs));
  const std::int64_t ld = 3 * d.c, qkv_stride = d.t * ld, tt = d.t * d.t;
  Tensor ds_scratch = Tensor::empty({d.b, d.t, d.t}, DType::kF32, qkv.device(), MemCategory::kActivations);
  float* ds = ds_scratch.data<float>();
  const cudaStream_t stream = ht::cuda::current_stream();
  for (std::int64_t h = 0; h < d.h; ++h) {
    const std::int64_t off = h * d.hs;
    const float* q = pqkv + off;
    const float* k = q + d.c;
    const float* v = q + 2 * d.c;
    float* dq = pdqkv + off;
    float* dk = dq + d.c;
    float* dv = dq + 2 * d.c;
    const GemmOperand p_t{pp + h * tt, d.t, d.h * tt, true};  // P, used transposed
    const GemmOperand go{pdo + off, d.c, d.t * d.c, false};
    // dP = dO V^T ; dV = P^T dO
    ht::cuda::gemm(DType::kF32, d.t, d.t, d.hs, 1.f, go, GemmOperand{v, ld, qkv_stride, true}, 0.f, ds, d.t, tt,
                   d.b);
    ht::cuda::gemm(DType::kF32, d.t, d.hs, d.t, 1.f, p_t, go, 0.f, dv, ld, qkv_stride, d.b);
    // dS = softmax_grad(P, dP) * scale, zero above the diagonal.
    HT_CUDA_CHECK(ht::cuda::launch_causal_softmax_backward(pp, ds, d.b, d.h, h, d.t, scale, stream));
    // dQ = dS K ; dK = dS^T Q
    ht::cuda::gemm(DType::kF32, d.t, d.hs, d.t, 1.f, GemmOperand{ds, d.t, tt, false},
                   GemmOperand{k, ld, qkv_stride, false}, 0.f, dq, ld, qkv_stride, d.b);
    ht::cuda::gemm(DType::kF32, d.t, d.hs, d.t, 1.f, GemmOperand{ds, d.t, tt, true},
                   GemmOperand{q, ld, qkv_stride, false}, 0.f, dk, ld, qkv_stride, d.b);
  }
  // ds_scratch is released here. Tensor storage is freed with cudaFree, which
  // waits for the device to finish the work above; an allocator that frees
  // without waiting would have to be stream-ordered for this to stay safe.
}

}  // namespace ht::ops::cuda
