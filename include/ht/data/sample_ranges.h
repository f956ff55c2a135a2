// Which global samples each micro-batch of each data-parallel rank holds:
// the engine's data position as pure arithmetic (data_source.h has the
// contract and a worked example), tested exhaustively in data_test.
#pragma once

#include <cstdint>
#include <vector>

namespace ht::data {

struct SampleRange {
  std::int64_t first = 0;
  std::int64_t count = 0;
  bool operator==(const SampleRange&) const = default;
};

/// Training micro-batch j (of k in a step) of data-parallel rank d (of dp),
/// `rows` per micro-batch, in the step that starts after `consumed` samples:
/// [consumed + (j dp + d) rows, + rows).
SampleRange training_range(std::int64_t consumed, int j, int d, int dp, std::int64_t rows);

/// The validation micro-batches of data-parallel rank d (of dp) for a
/// validation set of `samples` (>= dp): rank d's share is [samples d / dp,
/// samples (d + 1) / dp) (shares differ by at most one), cut into the same
/// number of micro-batches on every rank, ceil(smallest share / rows), of
/// near-equal size (at most rows + 1 rows, never 0): every rank runs as many
/// forwards as the others (ZeRO-3 gathers in each), and together they cover
/// [0, samples) exactly once, whatever the layout. Empty when samples is 0.
std::vector<SampleRange> validation_ranges(std::int64_t samples, int d, int dp, std::int64_t rows);

}  // namespace ht::data
