// Private: the launchers of every CUDA kernel, one group per op family, each
// defined next to its kernels in kernels/<family>.cu.
//
// Why a raw-pointer boundary: CUDA translation units include no hypertrain
// header that pulls in ht::Error or fmt. nvcc 13.0's front end crashes on
// error.h (inheriting constructors whose base has a source_location::current()
// default argument) and rejects fmt 9's consteval format strings, so Tensors,
// validation and exceptions stay in the host-compiled drivers
// (kernels/<family>_driver.cc), and these functions take pointers, sizes and a
// stream, enqueue their work, and return cudaGetLastError() of the launch.
//
// Every launcher: sizes are element counts; n == 0 (or any empty dimension)
// launches nothing and returns cudaSuccess; work goes on `stream` and is
// asynchronous to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ht/core/dtype.h"
#include "optimizer_update.cuh"

namespace ht::cuda {

// matmul.cu ---------------------------------------------------------------

/// c_i = beta * c_i (zeros when beta == 0, without reading c) for the batch of
/// (m, n) matrices at c + i * stride_c with leading dimension ldc: the result
/// of a GEMM with k == 0. dtype f32, f16 or bf16.
cudaError_t launch_scale_matrix(DType dtype, void* c, std::int64_t m, std::int64_t n, std::int64_t ldc,
                                std::int64_t stride_c, std::int64_t batch, float beta, cudaStream_t stream);

// elementwise.cu ----------------------------------------------------------

cudaError_t launch_add(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream);
cudaError_t launch_scale(float* x, std::int64_t n, float s, cudaStream_t stream);
/// y (rows, c) += bias (c).
cudaError_t launch_bias_add(float* y, const float* bias, std::int64_t rows, std::int64_t c, cudaStream_t stream);
/// dbias (c) += column sums of dy (rows, c), in a fixed order.
cudaError_t launch_bias_grad(const float* dy, float* dbias, std::int64_t rows, std::int64_t c, cudaStream_t stream);
cudaError_t launch_gelu_forward(const float* x, float* y, std::int64_t n, cudaStream_t stream);
cudaError_t launch_gelu_backward(const float* x, const float* dy, float* dx, std::int64_t n, cudaStream_t stream);

// mul.cu ------------------------------------------------------------------

/// out (rows, c) = a (rows, c) * b, with b (c) repeated over the rows; rows ==
/// 1 is the same-shape product. out may alias a (and b when rows == 1).
cudaError_t launch_mul(const float* a, const float* b, float* out, std::int64_t rows, std::int64_t c,
                       cudaStream_t stream);
/// How many doubles of scratch launch_mul_column_sums needs for dy (rows, c).
std::int64_t mul_column_sums_scratch_count(std::int64_t rows, std::int64_t c);
/// db (c) = column sums of dy * a (rows, c), overwritten (zeros when rows ==
/// 0): each block of kern::kMulRowChunk rows summed in row order into
/// `scratch`, then the blocks added in order, all in double (kernels/
/// mul.cuh): the CPU driver's bits. c == 0 launches nothing.
cudaError_t launch_mul_column_sums(const float* dy, const float* a, float* db, std::int64_t rows, std::int64_t c,
                                   double* scratch, cudaStream_t stream);

// masked_mean.cu ----------------------------------------------------------

/// out (b, c) = the mean over the kept t (mask (b, t) nonzero) of x (b, t, c),
/// summed in double over t in order (the CPU driver's bits); 0 for a row
/// with none kept.
cudaError_t launch_masked_mean(const float* x, const std::int32_t* mask, float* out, std::int64_t b, std::int64_t t,
                               std::int64_t c, cudaStream_t stream);
/// dx (b, t, c) = dout (b, c) / count_b at kept positions, else 0; `counts`
/// is scratch for b ints.
cudaError_t launch_masked_mean_backward(const float* dout, const std::int32_t* mask, float* dx, std::int64_t b,
                                        std::int64_t t, std::int64_t c, std::int32_t* counts, cudaStream_t stream);

// dropout.cu --------------------------------------------------------------

/// out (rows, len) = x with element (r, j) kept (times kern::dropout_scale(p))
/// iff kern::dropout_keep(kern::dropout_hash(seed, site, first_row + r, j), p),
/// else 0. out may alias x.
cudaError_t launch_dropout(const float* x, float* out, std::int64_t rows, std::int64_t len, std::uint64_t seed,
                           std::uint64_t site, std::int64_t first_row, float p, cudaStream_t stream);

// silu.cu -----------------------------------------------------------------

cudaError_t launch_silu_forward(const float* x, float* y, std::int64_t n, cudaStream_t stream);
cudaError_t launch_silu_backward(const float* x, const float* dy, float* dx, std::int64_t n, cudaStream_t stream);
/// out (rows, f) = silu(gate) * up with gate_up (rows, 2f) = [gate | up].
cudaError_t launch_swiglu_forward(const float* gate_up, float* out, std::int64_t rows, std::int64_t f,
                                  cudaStream_t stream);
/// dgate_up (rows, 2f) overwritten from dout (rows, f); may alias gate_up.
cudaError_t launch_swiglu_backward(const float* dout, const float* gate_up, float* dgate_up, std::int64_t rows,
                                   std::int64_t f, cudaStream_t stream);

// layernorm.cu ------------------------------------------------------------

/// y, mean, rstd from x (n, c).
cudaError_t launch_layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                                     float* rstd, std::int64_t n, std::int64_t c, float eps, cudaStream_t stream);
/// dw += sum over rows of dy * xhat, db += sum over rows of dy, in a fixed order.
cudaError_t launch_layernorm_param_grad(const float* dy, const float* x, const float* mean, const float* rstd,
                                        float* dw, float* db, std::int64_t n, std::int64_t c, cudaStream_t stream);
/// dx (n, c) overwritten; dx may alias dy.
cudaError_t launch_layernorm_input_grad(const float* dy, const float* x, const float* w, const float* mean,
                                        const float* rstd, float* dx, std::int64_t n, std::int64_t c,
                                        cudaStream_t stream);

// rmsnorm.cu --------------------------------------------------------------

/// y, rstd from x (n, c); y may alias x.
cudaError_t launch_rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, std::int64_t n,
                                   std::int64_t c, float eps, cudaStream_t stream);
/// dw += sum over rows of dy * x * rstd, in a fixed order.
cudaError_t launch_rmsnorm_weight_grad(const float* dy, const float* x, const float* rstd, float* dw, std::int64_t n,
                                       std::int64_t c, cudaStream_t stream);
/// dx (n, c) overwritten; dx may alias dy.
cudaError_t launch_rmsnorm_input_grad(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                                      std::int64_t n, std::int64_t c, cudaStream_t stream);

// rope.cu -----------------------------------------------------------------

/// y (rows, n_head, 2 * half) = x rotated pair by pair, row r at position
/// r % t of table (positions, half, 2); inverse rotates by minus the angle.
/// y may alias x.
cudaError_t launch_rope(const float* x, const float* table, float* y, std::int64_t rows, std::int64_t t,
                        std::int64_t n_head, std::int64_t half, bool inverse, cudaStream_t stream);

// attention.cu ------------------------------------------------------------

/// One attention call's inputs (ops/attention_views.h): element pointers to
/// row 0 of head 0 of Q, K and V, whose rows of batch entry b start at
/// (b * t + i) * ld; out and dout are (batch, t, n_head * head_dim).
/// dtype (f32, f16 or bf16) is that of q, k, v, out, dout and the gradients.
struct AttentionArgs {
  DType dtype;
  const void* q;
  const void* k;
  const void* v;
  std::int64_t ld_q, ld_k, ld_v;
  std::int64_t batch, t, tk, n_head, n_kv_head, head_dim;  // t query rows, tk keys
  bool causal;
  std::int64_t causal_offset;    // causal: query i sees keys j <= i + causal_offset
  const std::int32_t* key_mask;  // (batch, tk), nonzero = may be attended; null for none
  /// (batch, t) with t == tk: query i sees key j only when their ids are
  /// equal (document masking); null for none.
  const std::int32_t* segment_ids;
};

/// Backward's other inputs and its outputs (dq, dk, dv overwritten; their
/// rows strided as q, k, v's with ld_dq, ld_dk, ld_dv).
struct AttentionGrads {
  const void* dout;
  const void* out;
  const float* lse;  // (batch, n_head, t)
  void* dq;
  void* dk;
  void* dv;
  std::int64_t ld_dq, ld_dk, ld_dv;
};

/// Dynamic shared memory one attention block needs at this dtype and head
/// dimension (the larger of forward and backward); the driver checks it
/// against the device's opt-in limit before launching.
std::size_t attention_smem_bytes(DType dtype, std::int64_t head_dim);
/// Flash-attention forward: out and lse (batch, n_head, t) f32.
cudaError_t launch_attention_forward(const AttentionArgs& a, void* out, float* lse, cudaStream_t stream);
/// Flash-attention backward: dq, dk, dv from dout, out and lse, deterministic.
cudaError_t launch_attention_backward(const AttentionArgs& a, const AttentionGrads& g, cudaStream_t stream);

// embedding.cu ------------------------------------------------------------

/// The first out-of-range index CUDA ops met, kept on the device until the
/// host reads it (ht::ops::raise_index_errors). Cleared to all ones bytes:
/// `first` is then ~0.
struct IndexErrorRecord {
  unsigned long long first;  // (position << 32) | uint32(value) of the lowest bad position, by atomicMin
  long long limit;           // the valid range [0, limit)
  long long row_length;      // positions per batch row (t), to name row and position
};

/// No ignored or allowed id (i32 ids never equal it).
constexpr std::int64_t kNoIgnore = std::int64_t(1) << 40;

/// Lowers record->first to the lowest position of `ids` (n < 2^31) whose id
/// lies outside [0, limit) and is not `allowed`, with its value, and stores limit and row_length
/// when there is one; the host does not wait.
cudaError_t launch_record_out_of_range(const std::int32_t* ids, std::int64_t n, std::int64_t limit,
                                       std::int64_t row_length, IndexErrorRecord* record, cudaStream_t stream,
                                       std::int64_t allowed = kNoIgnore);
/// *first_bad = min(*first_bad, i) over the positions i whose id lies outside
/// [0, limit) (atomicMin, so the result does not depend on scheduling); the
/// caller initialises *first_bad to all ones. Shared with cross-entropy.
cudaError_t launch_find_out_of_range(const std::int32_t* ids, std::int64_t n, std::int64_t limit,
                                     unsigned long long* first_bad, cudaStream_t stream);
/// out (n, c) = wte[ids - start] + wpe[i % t] (wpe may be null), where wte
/// holds the `rows` vocabulary rows from `start`; an id outside them (another
/// shard's, or out of range) adds no wte row.
cudaError_t launch_embedding_forward(const std::int32_t* ids, const float* wte, const float* wpe, float* out,
                                     std::int64_t n, std::int64_t t, std::int64_t c, std::int64_t start,
                                     std::int64_t rows, cudaStream_t stream);
/// Bytes of device scratch launch_embedding_backward_wte needs for n
/// positions and a shard of `rows` rows.
std::size_t embedding_plan_scratch_bytes(std::int64_t n, std::int64_t rows);
/// dwte[r] += the dout rows (n, c) of the positions whose id - start == r,
/// each row's positions added in increasing order, for r in [0, rows); other
/// ids are skipped. Planned on the device (a stable radix sort of (row,
/// position) pairs, then one block per run): no host wait. `scratch` holds
/// embedding_plan_scratch_bytes(n, rows) bytes, 256-byte aligned.
cudaError_t launch_embedding_backward_wte(const float* dout, const std::int32_t* ids, std::int64_t n,
                                          std::int64_t start, std::int64_t rows, std::int64_t c, float* dwte,
                                          void* scratch, cudaStream_t stream);
/// dwpe (t * c) += sum over b of dout (batch, t * c), b in order.
cudaError_t launch_embedding_backward_wpe(const float* dout, float* dwpe, std::int64_t batch, std::int64_t tc,
                                          cudaStream_t stream);

// cross_entropy.cu --------------------------------------------------------

/// losses, lse (n) from logits (n, v); targets already checked. A row whose
/// target is `ignore` (unless kNoIgnore) has loss 0; eps: label smoothing.
cudaError_t launch_cross_entropy_forward(const float* logits, const std::int32_t* targets, float* losses,
                                         float* lse, std::int64_t n, std::int64_t v, std::int64_t ignore, float eps,
                                         cudaStream_t stream);
/// lse (n) over the v columns of logits (n, v), which are vocabulary columns
/// [start, start + v); target_logit (n) = logits[i, targets[i] - start] where
/// that column is in range, else 0. Only the first `real` columns count
/// (the rest pad a padded vocabulary); real == 0 gives lse -inf. Targets
/// already checked.
cudaError_t launch_cross_entropy_shard_forward(const float* logits, const std::int32_t* targets, float* lse,
                                               float* target_logit, std::int64_t n, std::int64_t v,
                                               std::int64_t real, std::int64_t start, cudaStream_t stream);
/// dlogits (n, v), which may alias logits, whose columns are vocabulary
/// columns [start, start + v) (start 0: the whole vocabulary); lse is each
/// row's log-sum-exp over the whole vocabulary. Columns from `real` on pad
/// a padded vocabulary: their gradient is 0. Targets already checked. A row
/// whose target is `ignore` gets zeros; label smoothing eps spreads
/// `uniform` (eps / V of the whole vocabulary) over every real column.
cudaError_t launch_cross_entropy_backward(const float* logits, const std::int32_t* targets, const float* lse,
                                          float dloss, float* dlogits, std::int64_t n, std::int64_t v,
                                          std::int64_t real, std::int64_t start, std::int64_t ignore, float eps,
                                          float uniform, cudaStream_t stream);

// movement.cu -------------------------------------------------------------

/// rows x width elements of element_bytes (2 or 4) from src to dst, rows
/// src_pitch and dst_pitch elements apart.
cudaError_t launch_copy_rows(const void* src, std::int64_t src_pitch, void* dst, std::int64_t dst_pitch,
                             std::int64_t rows, std::int64_t width, int element_bytes, cudaStream_t stream);
/// out (a, n1, b, n0, c) = x (a, n0, b, n1, c) with dims = {a, n0, b, n1, c}.
cudaError_t launch_transpose(const void* x, void* out, const std::int64_t* dims, int element_bytes,
                             cudaStream_t stream);

// softmax.cu --------------------------------------------------------------

/// y (rows, v) = softmax or log_softmax of x over v; y may alias x.
cudaError_t launch_softmax_forward(const float* x, float* y, std::int64_t rows, std::int64_t v, bool log,
                                   cudaStream_t stream);
/// dx from y and dy (see ht/ops/softmax.h); dx may alias dy.
cudaError_t launch_softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t v,
                                    bool log, cudaStream_t stream);

// mse.cu ------------------------------------------------------------------

/// How many doubles of scratch launch_mse_forward needs for n elements.
std::int64_t mse_scratch_count(std::int64_t n);
/// *loss = mean of (pred - target)^2 over n elements, summed in double in a
/// fixed order; `scratch` holds mse_scratch_count(n) doubles.
cudaError_t launch_mse_forward(const float* pred, const float* target, std::int64_t n, double* scratch, float* loss,
                               cudaStream_t stream);
/// dpred = coef * (pred - target); dpred may alias pred.
cudaError_t launch_mse_backward(const float* pred, const float* target, float coef, float* dpred, std::int64_t n,
                                cudaStream_t stream);

// reduce.cu ---------------------------------------------------------------

/// out (outer, inner) = sum (or mean) over k of x (outer, size, inner), in
/// double, in a fixed order.
cudaError_t launch_reduce(const float* x, float* out, std::int64_t outer, std::int64_t size, std::int64_t inner,
                          bool mean, cudaStream_t stream);
/// dx (outer, size, inner) = dout (outer, inner) broadcast, divided by size for a mean.
cudaError_t launch_reduce_backward(const float* dout, float* dx, std::int64_t outer, std::int64_t size,
                                   std::int64_t inner, bool mean, cudaStream_t stream);

// index_select.cu ---------------------------------------------------------

/// out (outer, k, inner) = x (outer, size, inner) at index[i] along the
/// middle dimension; indices already checked.
cudaError_t launch_index_select(const float* x, const std::int32_t* index, float* out, std::int64_t outer,
                                std::int64_t size, std::int64_t k, std::int64_t inner, cudaStream_t stream);
/// dx (outer, size, inner) = 0, then dx[:, index[i], :] += dout (outer, k,
/// inner)[:, i, :] for i in order; indices already checked.
cudaError_t launch_index_select_backward(const float* dout, const std::int32_t* index, float* dx, std::int64_t outer,
                                         std::int64_t size, std::int64_t k, std::int64_t inner, cudaStream_t stream);

// cast.cu -----------------------------------------------------------------

cudaError_t launch_cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n,
                        cudaStream_t stream);
/// x *= scale; *found = 1 if any result is not finite.
cudaError_t launch_scale_and_check_finite(DType dtype, void* x, std::int64_t n, float scale, float* found,
                                          cudaStream_t stream);
/// How many doubles of scratch launch_sum_squares needs for n elements.
std::int64_t sum_squares_scratch_count(std::int64_t n);
/// *acc += sum of x^2, summed in double in a fixed order; `scratch` holds
/// sum_squares_scratch_count(n) doubles.
cudaError_t launch_sum_squares(DType dtype, const void* x, std::int64_t n, double* scratch, float* acc,
                               cudaStream_t stream);

// optimizer_update.cu -----------------------------------------------------

cudaError_t launch_adamw_update(float* param, DType grad_dtype, const void* grad, float* m, float* v,
                                std::int64_t n, const kern::AdamWCoeffs& coeffs, cudaStream_t stream);
/// `momentum_buf` may be null when coeffs.momentum == 0.
cudaError_t launch_sgd_update(float* param, DType grad_dtype, const void* grad, float* momentum_buf,
                              std::int64_t n, const kern::SgdCoeffs& coeffs, cudaStream_t stream);

}  // namespace ht::cuda
