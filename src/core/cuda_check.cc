// Error conversion for the CUDA runtime and cuBLAS.
#include "core/cuda_check.h"

#include <string>

namespace ht::detail {

void throw_cuda_error(cudaError_t code, const char* expr, std::source_location where) {
  const ErrorKind kind = code == cudaErrorMemoryAllocation ? ErrorKind::kOutOfMemory : ErrorKind::kCuda;
  throw Error(kind, fmt::format("{} failed: {}", expr, cudaGetErrorString(code)), where,
              fmt::format("{} ({})", cudaGetErrorName(code), int(code)));
}

void throw_cublas_error(cublasStatus_t code, const char* expr, std::source_location where) {
  // cuBLAS says only that its kernel failed; the runtime's pending error
  // says why (a lost device, an illegal address), so it is named too.
  std::string cause;
  if (const cudaError_t pending = cudaPeekAtLastError(); pending != cudaSuccess)
    cause = fmt::format("; the device reports: {} ({})", cudaGetErrorString(pending), cudaGetErrorName(pending));
  throw Error(ErrorKind::kCuda, fmt::format("{} failed: {}{}", expr, cublas().status_string(code), cause), where,
              fmt::format("{} ({})", cublas().status_name(code), int(code)));
}

}  // namespace ht::detail
