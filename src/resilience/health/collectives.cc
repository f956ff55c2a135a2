// The collectives health check: a correct all_reduce over the communicator,
// then its bus bandwidth.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ht/comm/communicator.h"
#include "ht/core/tensor.h"
#include "resilience/health/check_util.h"
#include "resilience/health/checks.h"

namespace ht::resilience::detail {

// collectives: an all_reduce of small integers whose sum is exact (rank r
// contributes (r + 1) * (i % 13 + 1) at index i, so the sum is
// n(n+1)/2 * (i % 13 + 1)); then an out-of-place all_reduce of allreduce_mib,
// timed between barriers, every rank reporting the slowest rank's time so that
// all ranks reach the same verdict.
CheckResult check_collectives(const HealthOptions& o, comm::Communicator& comm) {
  return run_check("collectives", [&](CheckResult& r) {
    r.unit = "GB/s";
    r.threshold = o.min_allreduce_busbw_gbps;
    const int n = comm.size(), rank = comm.rank();
    const Device dev = comm.device();
    const auto on_dev = [&](const Tensor& t) { return dev.is_cpu() ? t : t.to(dev); };

    constexpr std::int64_t small = 1237;  // a prime: no block size divides it
    std::vector<float> in(small);
    for (std::int64_t i = 0; i < small; ++i) in[std::size_t(i)] = float((rank + 1) * (i % 13 + 1));
    const Tensor small_in = on_dev(Tensor::from_vector(in, {small}));
    Tensor small_out = on_dev(Tensor::empty({small}, DType::kF32));
    comm.all_reduce(small_in, small_out, comm::ReduceOp::kSum)->wait();
    const std::vector<float> got = small_out.to_vector<float>();
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < small; ++i)
      if (got[std::size_t(i)] != float(std::int64_t(n) * (n + 1) / 2 * (i % 13 + 1))) ++wrong;

    const std::int64_t count = o.allreduce_mib * (1 << 20) / std::int64_t(sizeof(float));
    Tensor big_in = on_dev(Tensor::empty({count}, DType::kF32));
    Tensor big_out = on_dev(Tensor::empty({count}, DType::kF32));
    big_in.fill_(float(rank + 1));
    comm.all_reduce(big_in, big_out, comm::ReduceOp::kSum)->wait();  // warm-up: connections, buffers
    constexpr int reps = 3;
    comm.barrier()->wait();
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) comm.all_reduce(big_in, big_out, comm::ReduceOp::kSum)->wait();
    Tensor elapsed = on_dev(Tensor::from_vector(std::vector<float>{float(seconds_since(t0))}, {1}));
    comm.all_reduce(elapsed, elapsed, comm::ReduceOp::kMax)->wait();
    const double s = elapsed.item(0) / reps;
    const std::vector<float> big = big_out.to_vector<float>();
    const float expect = float(std::int64_t(n) * (n + 1) / 2);
    wrong += std::count_if(big.begin(), big.end(), [&](float v) { return v != expect; });

    const double bytes = double(count) * sizeof(float);
    r.value = bytes / s / 1e9 * 2.0 * (n - 1) / n;
    if (wrong > 0) {
      r.ok = false;
      r.reason = fmt::format("all_reduce over {} ranks of group '{}' gave {} wrong elements (of {})", n, comm.name(),
                             wrong, small + count);
      return;
    }
    r.reason = fmt::format("all_reduce over {} ranks of group '{}' correct; {} MiB in {:.2f} ms (bus bandwidth)", n,
                           comm.name(), o.allreduce_mib, s * 1e3);
    require_min(r, fmt::format("all_reduce of {} MiB over {} ranks: bus bandwidth", o.allreduce_mib, n));
  });
}

}  // namespace ht::resilience::detail
