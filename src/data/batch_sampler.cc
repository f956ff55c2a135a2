// ht::data::BatchSampler.
#include "ht/data/batch_sampler.h"

#include <algorithm>
#include <cstring>

namespace ht::data {

BatchSampler::BatchSampler(const std::vector<std::int32_t>& tokens, std::int64_t seq_len, std::int64_t batch,
                           std::uint64_t seed, int rank, int world)
    : tokens_(tokens), seq_len_(seq_len), batch_(batch), rank_(rank), world_(world), rng_(seed) {
  HT_CHECK_ARG(seq_len > 0 && batch > 0, "batch sampler: seq_len={} and batch={} must be positive", seq_len, batch);
  HT_CHECK_ARG(world > 0 && rank >= 0 && rank < world, "batch sampler: rank {} outside world of {}", rank, world);
  HT_CHECK_ARG(std::int64_t(tokens.size()) > seq_len, "dataset of {} tokens is too short for one window of {} + 1 tokens; "
               "use more text or a shorter --seq-len", tokens.size(), seq_len);
}

MicroBatch BatchSampler::make(const std::vector<std::int64_t>& starts) const {
  const std::int64_t b = std::int64_t(starts.size());
  MicroBatch out{Tensor::empty({b, seq_len_}, DType::kI32, Device::cpu(), MemCategory::kActivations),
            Tensor::empty({b, seq_len_}, DType::kI32, Device::cpu(), MemCategory::kActivations)};
  for (std::int64_t i = 0; i < b; ++i) {
    const std::int32_t* src = tokens_.data() + starts[std::size_t(i)];
    std::memcpy(out.input.data<std::int32_t>() + i * seq_len_, src, std::size_t(seq_len_) * sizeof(std::int32_t));
    std::memcpy(out.target.data<std::int32_t>() + i * seq_len_, src + 1, std::size_t(seq_len_) * sizeof(std::int32_t));
  }
  return out;
}

MicroBatch BatchSampler::next() {
  const std::uint64_t span = tokens_.size() - std::size_t(seq_len_);  // valid starts: [0, span)
  std::vector<std::int64_t> starts;
  for (std::int64_t row = 0; row < batch_ * world_; ++row) {
    const std::int64_t start = std::int64_t(rng_.below(span));
    if (row / batch_ == rank_) starts.push_back(start);
  }
  return make(starts);
}

MicroBatch BatchSampler::sequential(std::int64_t index) const {
  const std::int64_t windows = std::int64_t((tokens_.size() - 1) / std::size_t(seq_len_));
  std::vector<std::int64_t> starts;
  for (std::int64_t i = 0; i < batch_; ++i)
    starts.push_back(((index * batch_ * world_ + rank_ * batch_ + i) % windows) * seq_len_);
  return make(starts);
}

}  // namespace ht::data
