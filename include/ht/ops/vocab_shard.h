// Which rows of a vocabulary one tensor-parallel rank holds: the shard
// argument of the vocabulary-parallel embedding and cross-entropy ops.
#pragma once

#include <cstdint>

namespace ht::ops {

/// The rows [start, start + rows) of a vocabulary of `size` ids that one tensor-parallel rank holds
/// (rows = the local tensor's row/column count). size -1: unsharded (the local tensor is the whole vocabulary).
struct VocabShard {
  std::int64_t start = 0;
  std::int64_t size = -1;
};

}  // namespace ht::ops
