// What the modes of ht-parallel-bench share (parallel_common.h).
#include "parallel_common.h"

#include <algorithm>
#include <bit>

#include "ht/core/tensor.h"

namespace ht::bench {

train::EngineOptions base_options(const ParallelArgs& a) {
  train::EngineOptions o;
  o.layout = {.tp = a.tp, .pp = a.pp, .micro_batch = a.micro_batch};
  o.steps = a.warmup + a.steps;
  o.warmup_steps = 1;
  o.eval_samples = 8;
  return o;
}

data::TokenSplits splits_for(const ParallelArgs& a, const models::GPTConfig& model, int dp) {
  const std::int64_t window = a.seq + 1;
  const std::int64_t train = std::max<std::int64_t>(window * a.micro_batch * dp * 64, 1 << 16);
  return random_tokens(model.vocab_size, train, 2 * window, 2024);
}

namespace {

/// Every rank's `mine` (same length everywhere), rank-major. Values travel as
/// raw 64-bit words split into two i32 (an all_gather copies bits).
std::vector<std::uint64_t> gather_words(comm::Communicator& c, const std::vector<std::uint64_t>& mine) {
  const std::int64_t n = std::int64_t(mine.size());
  Tensor in = Tensor::empty({2 * n}, DType::kI32);
  Tensor out = Tensor::empty({2 * n * c.size()}, DType::kI32);
  auto* p = in.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    p[2 * i] = std::int32_t(std::uint32_t(mine[std::size_t(i)] >> 32));
    p[2 * i + 1] = std::int32_t(std::uint32_t(mine[std::size_t(i)]));
  }
  c.all_gather(in, out)->wait();
  std::vector<std::uint64_t> all(std::size_t(n * c.size()));
  const auto* q = out.data<std::int32_t>();
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = (std::uint64_t(std::uint32_t(q[2 * i])) << 32) | std::uint32_t(q[2 * i + 1]);
  return all;
}

}  // namespace

std::vector<std::int64_t> gather_i64(comm::Communicator& c, const std::vector<std::int64_t>& mine) {
  std::vector<std::uint64_t> w(mine.begin(), mine.end());
  const std::vector<std::uint64_t> all = gather_words(c, w);
  return {all.begin(), all.end()};
}

std::vector<double> gather_f64(comm::Communicator& c, const std::vector<double>& mine) {
  std::vector<std::uint64_t> w;
  for (double v : mine) w.push_back(std::bit_cast<std::uint64_t>(v));
  std::vector<double> all;
  for (std::uint64_t u : gather_words(c, w)) all.push_back(std::bit_cast<double>(u));
  return all;
}

std::vector<std::int64_t> max_over_ranks(const std::vector<std::int64_t>& all, int ranks) {
  const std::size_t n = all.size() / std::size_t(ranks);
  std::vector<std::int64_t> m(n, 0);
  for (int r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < n; ++i) m[i] = std::max(m[i], all[std::size_t(r) * n + i]);
  return m;
}

}  // namespace ht::bench
