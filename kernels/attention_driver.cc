// CUDA flash attention, one driver for both public forms (packed qkv, and
// separate q, k, v with grouped-query heads and masks; segment ids for
// either; see ops/attention_views.h): turns tensors into the raw strided
// views the kernels in attention.cu take, checks the head dimension fits the
// kernels' shared memory, and launches. f32, f16 and bf16 tensors are taken
// as they are (the 16-bit ones go to tensor cores); lse is f32.
//
// Q of query head h and K, V of its key/value head g = h / group are columns
// [h*D, (h+1)*D) and [g*D, (g+1)*D) of rows with strides ld_q, ld_k, ld_v;
// the kernels read them in place, no permuted copies are made, and no
// scratch memory is allocated.
#include <cmath>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/attention_views.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {
namespace {

using detail::AttentionShape;

// The views of QkvViews, in elements of the tensors' dtype, as the
// launcher's untyped arguments. `base_*` are the tensors' data pointers.
ht::cuda::AttentionArgs args_for(const AttentionShape& s, DType dtype, const void* q, const void* k, const void* v,
                                 std::int64_t ld_q, std::int64_t ld_k, std::int64_t ld_v, const Tensor& key_mask,
                                 const Tensor& segment_ids) {
  const auto ids = [](const Tensor& t) { return t.defined() ? t.data<std::int32_t>() : nullptr; };
  return {dtype,    q,     k,   v,        ld_q,        ld_k,       ld_v,
          s.batch,  s.t,   s.tk, s.n_head, s.n_kv_head, s.head_dim, s.causal,
          s.offset, ids(key_mask), ids(segment_ids)};
}

// Element pointer `offset` elements past `base`.
const void* at(const void* base, std::int64_t offset, DType dtype) {
  return static_cast<const char*>(base) + offset * std::int64_t(dtype_size(dtype));
}
void* at(void* base, std::int64_t offset, DType dtype) {
  return static_cast<char*>(base) + offset * std::int64_t(dtype_size(dtype));
}

// The packed (B, T, 3C) tensor's thirds: Q at 0, K at C, V at 2C; row stride 3C.
ht::cuda::AttentionArgs packed_args(const Tensor& qkv, const AttentionShape& s, const Tensor& segment_ids) {
  const std::int64_t c = s.q_width();
  const void* base = qkv.data_ptr();
  return args_for(s, qkv.dtype(), base, at(base, c, qkv.dtype()), at(base, 2 * c, qkv.dtype()), 3 * c, 3 * c, 3 * c,
                  Tensor(), segment_ids);
}

ht::cuda::AttentionArgs separate_args(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& s,
                                      const Tensor& key_mask, const Tensor& segment_ids) {
  const std::int64_t kv_width = s.n_kv_head * s.head_dim;
  return args_for(s, q.dtype(), q.data_ptr(), k.data_ptr(), v.data_ptr(), s.q_width(), kv_width, kv_width, key_mask,
                  segment_ids);
}

// The kernels hold tiles of Q, K, V (and dO) of the whole head dimension in
// shared memory: refuse what does not fit the device.
void check_fits(const char* op, const ht::cuda::AttentionArgs& a, Device device) {
  int limit = 0;
  HT_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device.index));
  const std::size_t need = ht::cuda::attention_smem_bytes(a.dtype, a.head_dim);
  HT_CHECK(need <= std::size_t(limit), ErrorKind::kNotSupported,
           "{}: head dimension {} in {} needs {} bytes of shared memory per block on CUDA, the device allows {}: use "
           "a smaller head dimension (up to 256 fits f32 on sm_90) or f16/bf16",
           op, a.head_dim, dtype_name(a.dtype), need, limit);
}

void forward(const ht::cuda::AttentionArgs& a, void* out, float* lse, Device device) {
  if (a.batch * a.t * a.head_dim == 0) return;
  const ht::cuda::DeviceGuard guard(device);
  check_fits("attention_forward", a, device);
  HT_CUDA_CHECK(ht::cuda::launch_attention_forward(a, out, lse, ht::cuda::current_stream()));
}

void backward(const ht::cuda::AttentionArgs& a, const ht::cuda::AttentionGrads& g, Device device) {
  if (a.batch * (a.t + a.tk) * a.head_dim == 0) return;
  const ht::cuda::DeviceGuard guard(device);
  check_fits("attention_backward", a, device);
  HT_CUDA_CHECK(ht::cuda::launch_attention_backward(a, g, ht::cuda::current_stream()));
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, const Tensor& segment_ids, Tensor& out, Tensor& lse) {
  const AttentionShape s = detail::packed_attention_shape(qkv, n_head);
  forward(packed_args(qkv, s, segment_ids), out.data_ptr(), lse.data<float>(), qkv.device());
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                        const Tensor& segment_ids, Tensor& dqkv) {
  const AttentionShape s = detail::packed_attention_shape(qkv, n_head);
  const std::int64_t c = s.q_width();
  void* base = dqkv.data_ptr();
  const ht::cuda::AttentionGrads g{dout.data_ptr(), out.data_ptr(), lse.data<float>(), base,
                                   at(base, c, dqkv.dtype()), at(base, 2 * c, dqkv.dtype()), 3 * c, 3 * c, 3 * c};
  backward(packed_args(qkv, s, segment_ids), g, qkv.device());
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                       const Tensor& key_mask, const Tensor& segment_ids, Tensor& out, Tensor& lse) {
  const AttentionShape s = detail::attention_shape(q, k, o);
  forward(separate_args(q, k, v, s, key_mask, segment_ids), out.data_ptr(), lse.data<float>(), q.device());
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionOptions& o, const Tensor& key_mask,
                        const Tensor& segment_ids, Tensor& dq, Tensor& dk, Tensor& dv) {
  const AttentionShape s = detail::attention_shape(q, k, o);
  const std::int64_t kv_width = s.n_kv_head * s.head_dim;
  const ht::cuda::AttentionGrads g{dout.data_ptr(), out.data_ptr(), lse.data<float>(), dq.data_ptr(),
                                   dk.data_ptr(),   dv.data_ptr(),  s.q_width(),       kv_width,
                                   kv_width};
  backward(separate_args(q, k, v, s, key_mask, segment_ids), g, q.device());
}

}  // namespace ht::ops::cuda
