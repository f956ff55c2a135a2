// Which rows of a vocabulary one tensor-parallel rank holds: the shard
// argument of the vocabulary-parallel embedding and cross-entropy ops.
#pragma once

#include <cstdint>

namespace ht::ops {

/// The rows [start, start + rows) of a vocabulary of `size` ids that one tensor-parallel rank holds
/// (rows = the local tensor's row/column count). size -1: unsharded (the local tensor is the whole vocabulary).
///
/// A padded table (GPT-2's 50257 ids stored as 50304 rows, so that GEMMs get
/// aligned leading dimensions) sets `padded_size` to its full row count:
/// rows [size, padded_size) are padding, never a token id. The shards then
/// tile [0, padded_size); a shard's real ids are its first
/// max(0, min(rows, size - start)) rows. The cross-entropy ops leave the
/// padding columns out of the softmax and give them a zero gradient; the
/// embedding ops never read or write them (tokens are checked against
/// `size`). -1: no padding (padded_size = size).
struct VocabShard {
  std::int64_t start = 0;
  std::int64_t size = -1;
  std::int64_t padded_size = -1;
  /// How many of a shard of `rows` rows are real ids (rows when unpadded).
  std::int64_t real_rows(std::int64_t rows) const {
    if (size < 0) return rows;
    const std::int64_t real = size - start;
    return real < 0 ? 0 : real < rows ? real : rows;
  }
};

}  // namespace ht::ops
