// The device-side index-error records and their reading by the host
// (ht::ops::raise_index_errors on a CUDA device).
#include <algorithm>
#include <array>
#include <mutex>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/cuda_sync.h"
#include "index_check.h"
#include "ops/index_errors_backend.h"

namespace ht::cuda {

IndexErrorRecord* index_error_records(int device) {
  constexpr int kMaxDevices = 64;
  constexpr std::size_t kBytes = sizeof(IndexErrorRecord) * std::size_t(IndexOp::kCount);
  static std::array<IndexErrorRecord*, kMaxDevices> records{};
  static std::mutex mu;
  HT_CHECK(device >= 0 && device < kMaxDevices, ErrorKind::kInvalidArgument, "CUDA device {} is past the {} supported",
           device, kMaxDevices);
  std::lock_guard lock(mu);
  IndexErrorRecord*& r = records[std::size_t(device)];
  if (!r) {
    // Once per device and process (never freed: the records outlive every
    // stream that writes them), so not a steady-state allocation.
    const DeviceGuard guard(Device::cuda(device));
    void* p = nullptr;
    HT_CUDA_CHECK(cudaMalloc(&p, kBytes));
    HT_CUDA_CHECK(cudaMemset(p, 0xff, kBytes));  // cleared: first = ~0
    r = static_cast<IndexErrorRecord*>(p);
  }
  return r;
}

}  // namespace ht::cuda

namespace ht::ops::detail {

void raise_cuda_index_errors(Device device) {
  using ht::cuda::IndexOp;
  const ht::cuda::DeviceGuard guard(device);
  const cudaStream_t stream = ht::cuda::current_stream();
  ht::cuda::IndexErrorRecord* records = ht::cuda::index_error_records(device.index);
  std::array<ht::cuda::IndexErrorRecord, std::size_t(IndexOp::kCount)> seen{};
  HT_CUDA_CHECK(cudaMemcpyAsync(seen.data(), records, sizeof seen, cudaMemcpyDeviceToHost, stream));
  ht::cuda::synchronize_stream(stream);
  const auto bad = std::find_if(seen.begin(), seen.end(), [](const auto& r) { return r.first != ~0ull; });
  if (bad == seen.end()) return;
  HT_CUDA_CHECK(cudaMemsetAsync(records, 0xff, sizeof seen, stream));  // the next errors are reported afresh
  const std::int64_t position = std::int64_t(bad->first >> 32);
  const auto value = static_cast<std::int32_t>(static_cast<std::uint32_t>(bad->first & 0xffffffffu));
  if (IndexOp(bad - seen.begin()) == IndexOp::kCrossEntropy)
    throw Error(ErrorKind::kOutOfRange,
                fmt::format("cross_entropy on {}: target {} at row {} is outside the vocabulary [0, {}); its loss "
                            "and gradient were skipped. Check the dataset's targets against the model's vocab_size",
                            device.str(), value, position, bad->limit));
  const std::int64_t t = std::max<std::int64_t>(bad->row_length, 1);
  throw Error(ErrorKind::kOutOfRange,
              fmt::format("embedding on {}: token id {} at batch row {}, position {} is outside the vocabulary [0, "
                          "{}); its row was skipped. Check the dataset's tokenizer against the model's vocab_size",
                          device.str(), value, position / t, position % t, bad->limit));
}

}  // namespace ht::ops::detail
