// The emulated device's errors, devices and their properties.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "internal.h"

namespace ht::emu {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

std::mutex g_mutex;
cudaError_t g_sticky = cudaSuccess;
std::string* g_sticky_message = nullptr;  // leaked: cudaGetErrorString's result must outlive every caller
std::map<const void*, std::size_t>& g_max_dynamic_shared = *new std::map<const void*, std::size_t>;  // never destroyed: streams' threads may launch at exit

}  // namespace

cudaError_t set_last_error(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

void fail_device(cudaError_t e, const std::string& what) {
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "ht-emu: %s\n", what.c_str());
  if (g_sticky != cudaSuccess) return;  // the first failure is the one to report
  g_sticky_message = new std::string(what);
  g_sticky = e;
}

cudaError_t sticky_error() {
  std::lock_guard lock(g_mutex);
  return g_sticky;
}

cudaError_t result(cudaError_t e) {
  const cudaError_t sticky = sticky_error();
  return set_last_error(sticky != cudaSuccess ? sticky : e);
}

bool fault_injected(const char* name) {
  static const std::string faults = [] {
    const char* env = std::getenv("HT_EMU_FAULTS");
    return "," + std::string(env ? env : "") + ",";
  }();
  return faults.find("," + std::string(name) + ",") != std::string::npos;
}

int device_count() {
  static const int count = [] {
    const char* env = std::getenv("HT_EMU_DEVICES");
    const int n = env ? std::atoi(env) : 1;
    return n < 0 ? 0 : n;
  }();
  return count;
}

std::size_t max_dynamic_shared(const void* function) {
  std::lock_guard lock(g_mutex);
  auto it = g_max_dynamic_shared.find(function);
  return it == g_max_dynamic_shared.end() ? kDefaultSharedBytes : it->second;
}

}  // namespace ht::emu

using namespace ht::emu;

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  {
    std::lock_guard lock(g_mutex);
    if (error != cudaSuccess && error == g_sticky && g_sticky_message) return g_sticky_message->c_str();
  }
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

cudaError_t cudaGetLastError() {
  const cudaError_t sticky = sticky_error();
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return sticky != cudaSuccess ? sticky : e;
}

cudaError_t cudaPeekAtLastError() {
  const cudaError_t sticky = sticky_error();
  return sticky != cudaSuccess ? sticky : t_last_error;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return set_last_error(cudaErrorInvalidValue);
  *count = device_count();
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return set_last_error(cudaErrorInvalidValue);
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return set_last_error(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (!p) return set_last_error(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count()) return set_last_error(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "hypertrain emulated device (H100-class, sm_90)");
  p->totalGlobalMem = kDeviceMemoryBytes;
  p->sharedMemPerBlock = kDefaultSharedBytes;
  p->sharedMemPerBlockOptin = kMaxSharedBytesOptin;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->clockRate = 1980000;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = kMultiProcessors;
  p->ECCEnabled = 1;
  p->pciDeviceID = device;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return set_last_error(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count()) return set_last_error(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(kDefaultSharedBytes); break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = kMultiProcessors; break;
    case cudaDevAttrEccEnabled: *value = 1; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(kMaxSharedBytesOptin); break;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    default: return set_last_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  drain_all();
  return result(cudaSuccess);
}

cudaError_t cudaDeviceReset() {
  // As after a GPU's reset, the failure is over; allocations stay (the
  // runtime's reset frees them; code that resets allocates again anyway).
  drain_all();
  std::lock_guard lock(g_mutex);
  g_sticky = cudaSuccess;
  t_last_error = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func || attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      std::size_t(value) > kMaxSharedBytesOptin)
    return set_last_error(cudaErrorInvalidValue);
  std::lock_guard lock(g_mutex);
  g_max_dynamic_shared[func] = std::size_t(value);
  return cudaSuccess;
}
