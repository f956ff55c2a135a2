// Private: the one cuBLAS GEMM entry point of the CUDA drivers (matmul and
// attention), in row-major terms with explicit leading dimensions and batch
// strides, so that callers can multiply strided views such as one head's
// columns of a packed QKV tensor.
#pragma once

#include <cstdint>

#include "ht/core/dtype.h"

namespace ht::cuda {

/// One row-major operand: element (r, c) of batch entry i is at
/// data[i * batch_stride + r * ld + c], in elements. `trans` means the stored
/// matrix is the transpose of the one multiplied.
struct GemmOperand {
  const void* data;
  std::int64_t ld;
  std::int64_t batch_stride;
  bool trans;
};

/// For i < batch: C_i = alpha * op(A_i) @ op(B_i) + beta * C_i, with op(A_i)
/// (m, k), op(B_i) (k, n) and C_i (m, n) at c + i * stride_c with leading
/// dimension ldc. A, B and C all have `dtype` (f32, f16 or bf16); products
/// accumulate in f32. beta == 0 overwrites C without reading it (NaN in C is
/// fine); k == 0 gives C = beta * C. Enqueued on the current stream of the
/// current device. Throws ht::Error(kCuda) if cuBLAS fails.
void gemm(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const GemmOperand& a,
          const GemmOperand& b, float beta, void* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch);

}  // namespace ht::cuda
