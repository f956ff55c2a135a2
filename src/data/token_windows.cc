// ht::data::TokenWindows.
#include "ht/data/token_windows.h"

#include <cstring>

#include "ht/core/rng.h"

namespace ht::data {

std::int64_t random_window_start(std::uint64_t seed, std::int64_t sample, std::int64_t tokens, std::int64_t seq_len) {
  Rng rng;
  rng.set_state(seed, std::uint64_t(sample));  // sample i's own draw: the counter is the index
  return std::int64_t(rng.below(std::uint64_t(tokens - seq_len)));  // valid starts: [0, tokens - seq_len)
}

std::int64_t sequential_window_start(std::int64_t sample, std::int64_t tokens, std::int64_t seq_len) {
  return (sample % ((tokens - 1) / seq_len)) * seq_len;
}

TokenWindows::TokenWindows(const std::vector<std::int32_t>& tokens, std::int64_t seq_len)
    : tokens_(tokens), seq_len_(seq_len) {
  HT_CHECK_ARG(seq_len > 0, "token windows: seq_len={} must be positive", seq_len);
  HT_CHECK_ARG(std::int64_t(tokens.size()) > seq_len,
               "dataset of {} tokens is too short for one window of {} + 1 tokens; use more text or a shorter "
               "--seq-len",
               tokens.size(), seq_len);
}

std::int64_t TokenWindows::windows() const { return std::int64_t((tokens_.size() - 1) / std::size_t(seq_len_)); }

MicroBatch TokenWindows::make(const std::vector<std::int64_t>& starts) const {
  const std::int64_t b = std::int64_t(starts.size());
  MicroBatch out;
  out.input = Tensor::empty({b, seq_len_}, DType::kI32, Device::cpu(), MemCategory::kActivations);
  out.target = Tensor::empty({b, seq_len_}, DType::kI32, Device::cpu(), MemCategory::kActivations);
  for (std::int64_t i = 0; i < b; ++i) {
    const std::int32_t* src = tokens_.data() + starts[std::size_t(i)];
    std::memcpy(out.input.data<std::int32_t>() + i * seq_len_, src, std::size_t(seq_len_) * sizeof(std::int32_t));
    std::memcpy(out.target.data<std::int32_t>() + i * seq_len_, src + 1, std::size_t(seq_len_) * sizeof(std::int32_t));
  }
  return out;
}

MicroBatch TokenWindows::random(std::uint64_t seed, std::int64_t first, std::int64_t count) const {
  HT_CHECK_ARG(first >= 0 && count >= 0, "token windows: samples [{}, {}) are not a range of sample indices", first,
               first + count);
  std::vector<std::int64_t> starts;
  for (std::int64_t i = first; i < first + count; ++i)
    starts.push_back(random_window_start(seed, i, std::int64_t(tokens_.size()), seq_len_));
  return make(starts);
}

MicroBatch TokenWindows::sequential(std::int64_t first, std::int64_t count) const {
  HT_CHECK_ARG(first >= 0 && count >= 0, "token windows: samples [{}, {}) are not a range of sample indices", first,
               first + count);
  std::vector<std::int64_t> starts;
  for (std::int64_t i = first; i < first + count; ++i)
    starts.push_back(sequential_window_start(i, std::int64_t(tokens_.size()), seq_len_));
  return make(starts);
}

}  // namespace ht::data
