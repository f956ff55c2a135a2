// Owners of CUDA streams and events, and the NCCL type mappings.
#include "comm/nccl_handles.h"

#include <mutex>
#include <set>
#include <utility>

#include "core/cuda_check.h"
#include "core/cuda_context.h"

namespace ht::comm::detail {

CudaStream::CudaStream(int device) {
  HT_CUDA_CHECK(cudaSetDevice(device));
  HT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (stream_) cudaStreamDestroy(stream_);  // errors ignored: a destructor must not throw
}

CudaStream::CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

CudaEvent::CudaEvent(int device) {
  HT_CUDA_CHECK(cudaSetDevice(device));
  HT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

ncclDataType_t to_nccl(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
  }
  throw Error(ErrorKind::kInternal, fmt::format("no NCCL type for dtype {}", int(dtype)));
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  throw Error(ErrorKind::kInternal, fmt::format("no NCCL reduction for op {}", int(op)));
}

namespace {

// Group names are few ("world", "dp.3", ...): keeping each once is nothing.
const char* interned(const std::string& name) {
  static std::mutex mu;
  static std::set<std::string> names;  // node-based: c_str() stays valid
  std::lock_guard lock(mu);
  return names.insert(name).first->c_str();
}

}  // namespace

ncclConfig_t nonblocking_config(const std::string& name) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking: no NCCL call waits for peers; each returns ncclInProgress
  // instead, and the caller polls ncclCommGetAsyncError with its own deadline.
  config.blocking = 0;
  config.commName = interned(name);
  return config;
}

}  // namespace ht::comm::detail
