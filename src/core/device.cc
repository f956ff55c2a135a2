// Device parsing and CUDA presence queries.
#include "ht/core/device.h"

#include <string>

#include "ht/config.h"
#include "ht/core/error.h"
#if HT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace ht {

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.size() < 12 &&
      name.find_first_not_of("0123456789", 5) == std::string::npos)
    return Device::cuda(std::stoi(name.substr(5)));
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("unknown device '{}': use cpu, cuda or cuda:N", name));
}

bool cuda_compiled() { return HT_HAVE_CUDA; }

int cuda_device_count() {
#if HT_HAVE_CUDA
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: clear the sticky error
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

}  // namespace ht
