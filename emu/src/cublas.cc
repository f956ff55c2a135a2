// The emulated cuBLAS (emu/include/cublas_v2.h): GEMMs over OpenBLAS's
// sgemm, ordered on the handle's stream.
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

std::size_t element_bytes(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

float load(cudaDataType t, const void* p, std::int64_t i) {
  switch (t) {
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void store(cudaDataType t, void* p, std::int64_t i, float v) {
  switch (t) {
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

/// A column-major (rows x cols) matrix with leading dimension ld, widened
/// to f32 (a plain copy for f32).
std::vector<float> widen(cudaDataType t, const void* p, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  std::vector<float> out(std::size_t(ld * (cols - 1) + rows));
  for (std::int64_t j = 0; j < cols; ++j)
    for (std::int64_t i = 0; i < rows; ++i) out[std::size_t(j * ld + i)] = load(t, p, j * ld + i);
  return out;
}

}  // namespace

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!ht::emu::resolve(stream)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "a cuBLAS error";
  }
}

cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t handle, cublasOperation_t transa,
                                             cublasOperation_t transb, std::int64_t m, std::int64_t n,
                                             std::int64_t k, const void* alpha_p, const void* a, cudaDataType a_type,
                                             std::int64_t lda, std::int64_t stride_a, const void* b,
                                             cudaDataType b_type, std::int64_t ldb, std::int64_t stride_b,
                                             const void* beta_p, void* c, cudaDataType c_type, std::int64_t ldc,
                                             std::int64_t stride_c, std::int64_t batch,
                                             cublasComputeType_t compute_type, cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !alpha_p || !beta_p) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < std::max<std::int64_t>(1, ta ? k : m) || ldb < std::max<std::int64_t>(1, tb ? n : k) ||
      ldc < std::max<std::int64_t>(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (a_type != b_type || a_type != c_type || element_bytes(a_type) == 0 || compute_type != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const float alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
  const cudaDataType t = c_type;
  const std::size_t es = element_bytes(t);
  const cudaError_t e = ht::emu::enqueue_work(handle->stream, [=] {
    const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
    for (std::int64_t i = 0; i < batch; ++i) {
      const char* ai = static_cast<const char*>(a) + std::size_t(i * stride_a) * es;
      const char* bi = static_cast<const char*>(b) + std::size_t(i * stride_b) * es;
      char* ci = static_cast<char*>(c) + std::size_t(i * stride_c) * es;
      const std::vector<float> af = widen(t, ai, a_rows, a_cols, lda), bf = widen(t, bi, b_rows, b_cols, ldb);
      // beta == 0: C is not read (it may hold NaN), as cuBLAS promises.
      std::vector<float> cf = beta == 0.f ? std::vector<float>(std::size_t(ldc * (n - 1) + m), 0.f)
                                          : widen(t, ci, m, n, ldc);
      if (k > 0)
        cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blasint(m),
                    blasint(n), blasint(k), alpha, af.data(), blasint(lda), bf.data(), blasint(ldb), beta, cf.data(),
                    blasint(ldc));
      else
        for (float& v : cf) v *= beta;
      if (ht::emu::fault_injected("gemm-wrong")) cf[0] += 1.f;
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t r = 0; r < m; ++r) store(t, ci, j * ldc + r, cf[std::size_t(j * ldc + r)]);
    }
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
