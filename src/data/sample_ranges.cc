// ht::data::training_range and validation_ranges.
#include "ht/data/sample_ranges.h"

#include "ht/core/error.h"

namespace ht::data {

SampleRange training_range(std::int64_t consumed, int j, int d, int dp, std::int64_t rows) {
  return {.first = consumed + (std::int64_t(j) * dp + d) * rows, .count = rows};
}

std::vector<SampleRange> validation_ranges(std::int64_t samples, int d, int dp, std::int64_t rows) {
  HT_CHECK_ARG(dp > 0 && d >= 0 && d < dp && rows > 0 && samples >= 0,
               "validation_ranges: rank {} of {}, {} rows per micro-batch, {} samples", d, dp, rows, samples);
  if (samples == 0) return {};
  HT_CHECK(samples >= dp, ErrorKind::kConfig,
           "--eval-samples {} is fewer than the {} data-parallel ranks: give at least {} (one sample per rank)",
           samples, dp, dp);
  const std::int64_t begin = samples * d / dp, end = samples * (d + 1) / dp, share = end - begin;
  const std::int64_t smallest = samples / dp;
  const std::int64_t n = (smallest + rows - 1) / rows;  // >= 1, <= share
  std::vector<SampleRange> out;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t a = begin + share * i / n, b = begin + share * (i + 1) / n;
    out.push_back({.first = a, .count = b - a});
  }
  return out;
}

}  // namespace ht::data
