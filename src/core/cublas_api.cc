// cuBLAS opened on first use (core/cublas_api.h).
#include "core/cublas_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <string>

#include "ht/config.h"
#include "ht/core/error.h"

namespace ht::detail {

namespace {

template <class F>
void resolve(void* lib, const char* name, const std::string& path, F& fn) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  HT_CHECK(fn, ErrorKind::kCuda, "'{}' has no function {}: a cuBLAS older than this build's ({})", path, name,
           CUBLAS_VER_MAJOR);
}

#if HT_CUDA_EMULATED
// The emulated device's cuBLAS is linked (emu/src/cublas.cc): nothing to open.
CublasApi open_cublas() {
  return CublasApi{&cublasCreate_v2,  &cublasDestroy_v2,      &cublasSetStream_v2, &cublasSetMathMode,
                   &cublasGemmStridedBatchedEx_64, &cublasGetStatusString, &cublasGetStatusName};
}
#else
CublasApi open_cublas() {
  const std::string name = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
  std::string path = name;
  void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string first_error = lib ? "" : ::dlerror();
#ifdef HT_CUDA_LIBRARY_DIR
  if (!lib) {
    path = std::string(HT_CUDA_LIBRARY_DIR) + "/" + name;
    lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
#endif
  HT_CHECK(lib, ErrorKind::kCuda,
           "cannot open cuBLAS ({}): {}; install the CUDA toolkit's cuBLAS or add its directory to LD_LIBRARY_PATH",
           name, first_error);
  CublasApi api;
  resolve(lib, "cublasCreate_v2", path, api.create);
  resolve(lib, "cublasDestroy_v2", path, api.destroy);
  resolve(lib, "cublasSetStream_v2", path, api.set_stream);
  resolve(lib, "cublasSetMathMode", path, api.set_math_mode);
  resolve(lib, "cublasGemmStridedBatchedEx_64", path, api.gemm_strided_batched_ex_64);
  resolve(lib, "cublasGetStatusString", path, api.status_string);
  resolve(lib, "cublasGetStatusName", path, api.status_name);
  return api;  // the library stays open for the process's life
}
#endif

}  // namespace

const CublasApi& cublas() {
  // Asked on every GEMM: once opened, one atomic load. Not a function-local
  // static initialised by open_cublas(), so that a failed open throws each
  // time it is asked, not once.
  static std::atomic<const CublasApi*> opened{nullptr};
  if (const CublasApi* api = opened.load(std::memory_order_acquire)) return *api;
  static std::mutex mu;
  static CublasApi api;
  std::lock_guard lock(mu);
  if (!api.create) api = open_cublas();
  opened.store(&api, std::memory_order_release);
  return api;
}

}  // namespace ht::detail
