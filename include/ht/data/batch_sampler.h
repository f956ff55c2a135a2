// Deterministic random batches of next-token windows from a token array.
//
// Every call draws the whole global batch (world * batch rows) from one
// seeded stream and returns this rank's rows, so the data a given step sees
// is the same whatever the number of ranks: dp=2 with batch 4 sees exactly
// the rows of one process with batch 8. The position (batches drawn) is part
// of a checkpoint.
#pragma once

#include <cstdint>
#include <vector>

#include "ht/core/rng.h"
#include "ht/data/data_source.h"

namespace ht::data {

class BatchSampler {
 public:
  /// Throws kInvalidArgument when the array is too short for one window of seq_len + 1.
  BatchSampler(const std::vector<std::int32_t>& tokens, std::int64_t seq_len, std::int64_t batch, std::uint64_t seed,
               int rank = 0, int world = 1);

  /// Input (batch, seq_len) i32 on the host, target the same windows shifted by one.
  MicroBatch next();
  std::uint64_t position() const { return rng_.counter(); }
  void set_position(std::uint64_t position) { rng_.set_state(rng_.seed(), position); }

  /// The `index`-th of the consecutive, non-overlapping windows (for
  /// validation); wraps around the array.
  MicroBatch sequential(std::int64_t index) const;

 private:
  MicroBatch make(const std::vector<std::int64_t>& starts) const;

  const std::vector<std::int32_t>& tokens_;
  std::int64_t seq_len_, batch_;
  int rank_, world_;
  Rng rng_;
};

}  // namespace ht::data
