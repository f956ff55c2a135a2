// Next-token windows of a token array, addressed by sample index: sample i of
// the training sequence is a window at a position drawn from (seed, i) alone,
// sample i of the validation sequence the i-th consecutive window. Either is
// a pure function of its index, so any range of samples reads the same rows
// whatever the batch it falls in (the DataSource contract).
#pragma once

#include <cstdint>
#include <vector>

#include "ht/data/data_source.h"

namespace ht::data {

/// Where training sample `sample` starts in an array of `tokens` tokens: a
/// position uniform over [0, tokens - seq_len), drawn from (seed, sample)
/// alone (Rng at seed, counter = sample). Needs tokens > seq_len > 0.
std::int64_t random_window_start(std::uint64_t seed, std::int64_t sample, std::int64_t tokens, std::int64_t seq_len);
/// Where validation sample `sample` starts: the (sample mod windows)-th of
/// the consecutive, non-overlapping windows, windows = (tokens - 1) / seq_len.
std::int64_t sequential_window_start(std::int64_t sample, std::int64_t tokens, std::int64_t seq_len);

class TokenWindows {
 public:
  /// `tokens` must outlive this object. Throws kInvalidArgument when the
  /// array is too short for one window of seq_len + 1 tokens.
  TokenWindows(const std::vector<std::int32_t>& tokens, std::int64_t seq_len);

  /// Samples [first, first + count): sample i is the window of seq_len
  /// tokens starting at a position uniform over the array, drawn from
  /// (seed, i); input (count, seq_len) i32 on the host, target the same
  /// windows shifted by one.
  MicroBatch random(std::uint64_t seed, std::int64_t first, std::int64_t count) const;
  /// Samples [first, first + count) of the consecutive, non-overlapping
  /// windows (sample i starts at token (i mod windows) seq_len).
  MicroBatch sequential(std::int64_t first, std::int64_t count) const;
  /// How many consecutive windows the array holds.
  std::int64_t windows() const;

 private:
  MicroBatch make(const std::vector<std::int64_t>& starts) const;

  const std::vector<std::int32_t>& tokens_;
  std::int64_t seq_len_;
};

}  // namespace ht::data
