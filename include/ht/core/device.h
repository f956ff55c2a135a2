// Where a tensor's bytes live: host memory or one CUDA device.
#pragma once

#include <string>

namespace ht {

enum class DeviceType : unsigned char { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::kCPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  constexpr bool is_cpu() const { return type == DeviceType::kCPU; }
  constexpr bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend constexpr bool operator==(Device, Device) = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

/// Parses "cpu", "cuda" or "cuda:N"; throws ht::Error otherwise.
Device parse_device(const std::string& name);

/// Whether this build has the CUDA backend compiled in.
bool cuda_compiled();
/// Number of CUDA devices usable now: 0 in a CPU-only build or without a
/// driver or device. Never throws.
int cuda_device_count();

}  // namespace ht
