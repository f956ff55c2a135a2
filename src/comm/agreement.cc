// ht::comm agreements over all_gather / all_reduce of host i32 tensors.
#include "ht/comm/agreement.h"

#include <algorithm>
#include <numeric>

#include "ht/core/fnv.h"
#include "ht/core/tensor.h"

namespace ht::comm {

std::vector<std::uint64_t> all_gather_u64(Communicator& c, std::uint64_t value) {
  const std::vector<std::int32_t> mine{std::int32_t(std::uint32_t(value)), std::int32_t(std::uint32_t(value >> 32))};
  Tensor all = Tensor::empty({2 * std::int64_t(c.size())}, DType::kI32, Device::cpu());
  c.all_gather(Tensor::from_vector(mine, {2}), all)->wait();
  const std::vector<std::int32_t> halves = all.to_vector<std::int32_t>();
  std::vector<std::uint64_t> values(std::size_t(c.size()));
  for (std::size_t r = 0; r < values.size(); ++r)
    values[r] = std::uint64_t(std::uint32_t(halves[2 * r])) | (std::uint64_t(std::uint32_t(halves[2 * r + 1])) << 32);
  return values;
}

int agree_min(Communicator& c, int value) {
  Tensor t = Tensor::from_vector(std::vector<std::int32_t>{value}, {1});
  c.all_reduce(t, t, ReduceOp::kMin)->wait();
  return t.data<std::int32_t>()[0];
}

std::uint64_t agree_min_u64(Communicator& c, std::uint64_t value) {
  const std::vector<std::uint64_t> v = all_gather_u64(c, value);
  return *std::min_element(v.begin(), v.end());
}

std::uint64_t agree_max_u64(Communicator& c, std::uint64_t value) {
  const std::vector<std::uint64_t> v = all_gather_u64(c, value);
  return *std::max_element(v.begin(), v.end());
}

std::int64_t sum_i64(Communicator& c, std::int64_t value) {
  const std::vector<std::uint64_t> v = all_gather_u64(c, std::uint64_t(value));
  std::uint64_t sum = 0;  // two's complement: the unsigned sum wraps as the signed one would
  for (std::uint64_t x : v) sum += x;
  return std::int64_t(sum);
}

bool all_equal_u64(Communicator& c, std::uint64_t value) {
  const std::vector<std::uint64_t> v = all_gather_u64(c, value);
  return std::all_of(v.begin(), v.end(), [&](std::uint64_t x) { return x == v.front(); });
}

bool all_equal(Communicator& c, std::string_view text) {
  return all_equal_u64(c, fnv1a(text));
}

}  // namespace ht::comm
