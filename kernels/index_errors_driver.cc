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

IndexErrorRecord* index_error_record(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<IndexErrorRecord*, kMaxDevices> records{};
  static std::mutex mu;
  HT_CHECK(device >= 0 && device < kMaxDevices, ErrorKind::kInvalidArgument, "CUDA device {} is past the {} supported",
           device, kMaxDevices);
  std::lock_guard lock(mu);
  IndexErrorRecord*& r = records[std::size_t(device)];
  if (!r) {
    // Once per device and process (never freed: the record outlives every
    // stream that writes it), so not a steady-state allocation.
    const DeviceGuard guard(Device::cuda(device));
    void* p = nullptr;
    HT_CUDA_CHECK(cudaMalloc(&p, sizeof(IndexErrorRecord)));
    HT_CUDA_CHECK(cudaMemset(p, 0xff, sizeof(IndexErrorRecord)));  // cleared: first = ~0
    r = static_cast<IndexErrorRecord*>(p);
  }
  return r;
}

}  // namespace ht::cuda

namespace ht::ops::detail {

void raise_cuda_index_errors(Device device) {
  const ht::cuda::DeviceGuard guard(device);
  const cudaStream_t stream = ht::cuda::current_stream();
  ht::cuda::IndexErrorRecord* record = ht::cuda::index_error_record(device.index);
  ht::cuda::IndexErrorRecord seen{};
  HT_CUDA_CHECK(cudaMemcpyAsync(&seen, record, sizeof seen, cudaMemcpyDeviceToHost, stream));
  ht::cuda::synchronize_stream(stream);
  if (seen.first == ~0ull) return;
  HT_CUDA_CHECK(cudaMemsetAsync(record, 0xff, sizeof seen, stream));  // the next error is reported afresh
  const std::int64_t position = std::int64_t(seen.first >> 32);
  const auto value = static_cast<std::int32_t>(static_cast<std::uint32_t>(seen.first & 0xffffffffu));
  const std::int64_t t = std::max<std::int64_t>(seen.row_length, 1);
  if (seen.op == int(ht::cuda::IndexOp::kCrossEntropy))
    throw Error(ErrorKind::kOutOfRange,
                fmt::format("cross_entropy on {}: target {} at row {} is outside the vocabulary [0, {}); its loss "
                            "and gradient were skipped. Check the dataset's targets against the model's vocab_size",
                            device.str(), value, position, seen.limit));
  throw Error(ErrorKind::kOutOfRange,
              fmt::format("embedding on {}: token id {} at batch row {}, position {} is outside the vocabulary [0, "
                          "{}); its row was skipped. Check the dataset's tokenizer against the model's vocab_size",
                          device.str(), value, position / t, position % t, seen.limit));
}

}  // namespace ht::ops::detail
