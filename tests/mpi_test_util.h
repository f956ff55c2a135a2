// Helpers shared by the multi-rank training tests: a small deterministic
// text corpus and the process's place in MPI_COMM_WORLD.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "ht/data/token_dataset.h"

namespace ht::test {

/// Two pangrams repeated (200 times for training, 10 for validation), as
/// token ids modulo `vocab`: structured enough that a small GPT learns it.
inline data::TokenSplits pangram_text(std::int64_t vocab) {
  data::TokenSplits s;
  s.vocab_size = vocab;
  const std::string phrase = "pack my box with five dozen liquor jugs; sphinx of black quartz, judge my vow. ";
  for (int i = 0; i < 200; ++i)
    for (char c : phrase) s.train.push_back(std::int32_t(c) % std::int32_t(vocab));
  for (int i = 0; i < 10; ++i)
    for (char c : phrase) s.val.push_back(std::int32_t(c) % std::int32_t(vocab));
  return s;
}

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace ht::test
