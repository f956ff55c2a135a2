// ht::data::TokenBatches: next-token training windows from a token array, as
// a DataSource for language models (GPT, Llama).
//
// Random access (data_source.h): training sample i is a window at a
// position drawn from (seed, i), validation sample i the i-th consecutive,
// non-overlapping window of the validation split (data::TokenWindows).
// Input is a window of seq_len tokens (B, T) i32, target the same window
// shifted by one. It keeps no position of its own: the engine's consumed
// samples are the position, so a checkpoint resumes on any layout.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "ht/data/data_source.h"
#include "ht/data/token_dataset.h"
#include "ht/data/token_windows.h"

namespace ht::data {

class TokenBatches : public DataSource {
 public:
  /// `splits` must outlive this object. Throws kConfig when seq_len is not
  /// positive, and kInvalidArgument (at attach) when a split is too short
  /// for one window.
  TokenBatches(const TokenSplits& splits, std::int64_t seq_len);

  void attach(const DataShard& shard) override;
  MicroBatch samples(std::int64_t first, std::int64_t count) override;
  bool has_validation() const override { return !splits_.val.empty(); }
  MicroBatch validation_samples(std::int64_t first, std::int64_t count) override;

  std::int64_t seq_len() const { return seq_len_; }
  const TokenSplits& splits() const { return splits_; }

 private:
  const TokenSplits& splits_;
  std::int64_t seq_len_;
  std::uint64_t seed_ = 0;
  std::optional<TokenWindows> train_, val_;
};

}  // namespace ht::data
