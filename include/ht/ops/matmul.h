// General matrix multiply: C = alpha * op(A) @ op(B) + beta * C, row-major,
// optionally batched. A, B and C share one compute dtype, f32, f16 or bf16
// (ht/ops/compute_dtype.h). CPU: OpenBLAS sgemm (or Eigen, selectable for
// measurement), on f32 copies of 16-bit operands; CUDA: cuBLAS, 16-bit
// operands as they are, always with f32 accumulation (tensor cores).
//
// Synchronous on CPU; on CUDA enqueued on the current stream.
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

struct MatmulOptions {
  bool trans_a = false;  // use A^T: A is stored (K, M)
  bool trans_b = false;  // use B^T: B is stored (N, K)
  float alpha = 1.f;
  float beta = 0.f;  // 0: C is overwritten (its old contents may be NaN)
};

/// 2-D: A (M,K) or (K,M) if trans_a, B (K,N) or (N,K) if trans_b, C (M,N).
/// 3-D: the same with a leading batch dimension shared by all three.
/// Throws kShapeMismatch naming the shapes when they do not chain, kDTypeMismatch
/// or kDeviceMismatch when the three disagree. With beta != 0, 16-bit C is read,
/// alpha * op(A) op(B) + beta * C formed in f32 and rounded once.
void matmul(const Tensor& a, const Tensor& b, Tensor& c, const MatmulOptions& options = {});

/// Which library runs host GEMMs. OpenBLAS is the default: on the reference
/// 2-core machine its sgemm is 1.3x Eigen's own product with the generic
/// kernels Debian's OpenBLAS picks there, and 6x with its AVX-512 kernels
/// (OPENBLAS_CORETYPE=SkylakeX); see docs/benchmarks.md.
enum class CpuGemmBackend { kOpenBlas, kEigen };
void set_cpu_gemm_backend(CpuGemmBackend backend);
CpuGemmBackend cpu_gemm_backend();

}  // namespace ht::ops
