// ht::data::TokenBatches: next-token training windows from a token array, as
// a DataSource for language models (GPT, Llama).
//
// Training micro-batches are random windows drawn by a BatchSampler from
// the run's seed (the whole global batch from one stream, this rank's rows
// kept); validation micro-batches are consecutive, non-overlapping windows.
// Input is a window of seq_len tokens (B, T) i32, target the same window
// shifted by one. The sampler's position is the state saved in checkpoints
// ("position").
#pragma once

#include <memory>
#include <vector>

#include "ht/data/batch_sampler.h"
#include "ht/data/data_source.h"
#include "ht/data/token_dataset.h"

namespace ht::data {

class TokenBatches : public DataSource {
 public:
  /// `splits` must outlive this object. Throws kConfig when seq_len is not
  /// positive, and kInvalidArgument (at attach) when a split is too short
  /// for one window.
  TokenBatches(const TokenSplits& splits, std::int64_t seq_len);

  void attach(const DataShard& shard) override;
  MicroBatch next() override;
  bool has_validation() const override { return !splits_.val.empty(); }
  MicroBatch validation(std::int64_t index) override;
  ClientState state() const override;
  void restore(const ClientState& state) override;

  std::int64_t seq_len() const { return seq_len_; }
  const TokenSplits& splits() const { return splits_; }

 private:
  const TokenSplits& splits_;
  std::int64_t seq_len_;
  std::unique_ptr<BatchSampler> train_, val_;
};

}  // namespace ht::data
