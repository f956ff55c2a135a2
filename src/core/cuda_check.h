// Private: turns CUDA runtime and cuBLAS return codes into ht::Error at the
// call site. Included only by CUDA-enabled translation units.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/cublas_api.h"
#include "ht/core/error.h"

namespace ht::detail {
[[noreturn]] void throw_cuda_error(cudaError_t code, const char* expr, std::source_location where);
[[noreturn]] void throw_cublas_error(cublasStatus_t code, const char* expr, std::source_location where);
}  // namespace ht::detail

#define HT_CUDA_CHECK(expr)                                                                        \
  do {                                                                                             \
    cudaError_t ht_err_ = (expr);                                                                  \
    if (ht_err_ != cudaSuccess)                                                                    \
      ::ht::detail::throw_cuda_error(ht_err_, #expr, std::source_location::current());             \
  } while (0)

#define HT_CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                             \
    cublasStatus_t ht_st_ = (expr);                                                                \
    if (ht_st_ != CUBLAS_STATUS_SUCCESS)                                                           \
      ::ht::detail::throw_cublas_error(ht_st_, #expr, std::source_location::current());            \
  } while (0)
