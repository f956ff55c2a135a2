// Private: cuBLAS, opened when a CUDA matmul first needs it. Linked, it cost
// every process that loads the library about half a second at start-up
// (cuBLASLt's relocations: some 25,000 page faults), CPU-only runs, tools,
// health checks and every relaunched rank included.
#pragma once

#include <cublas_v2.h>

namespace ht::detail {

/// The cuBLAS functions the library calls.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasGemmStridedBatchedEx_64) gemm_strided_batched_ex_64 = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
};

/// libcublas.so.<major> of the toolkit built against, opened on the first
/// call (by name, then from the toolkit's library directory). Throws kCuda
/// naming the library and what the loader said when it cannot be opened.
const CublasApi& cublas();

}  // namespace ht::detail
