// ht::data::TokenBatches: token windows as a DataSource.
#include "ht/data/token_batches.h"

namespace ht::data {

TokenBatches::TokenBatches(const TokenSplits& splits, std::int64_t seq_len) : splits_(splits), seq_len_(seq_len) {
  HT_CHECK(seq_len > 0, ErrorKind::kConfig, "--seq-len must be positive, got {}", seq_len);
}

void TokenBatches::attach(const DataShard& shard) {
  seed_ = shard.seed;
  train_.emplace(splits_.train, seq_len_);
  if (has_validation()) val_.emplace(splits_.val, seq_len_);
}

MicroBatch TokenBatches::samples(std::int64_t first, std::int64_t count) {
  HT_CHECK(train_, ErrorKind::kInvalidArgument, "TokenBatches: samples() before attach()");
  return train_->random(seed_, first, count);
}

MicroBatch TokenBatches::validation_samples(std::int64_t first, std::int64_t count) {
  HT_CHECK(val_, ErrorKind::kNotSupported,
           "TokenBatches: no validation split (or validation_samples() before attach()); turn validation off "
           "(--eval-samples 0)");
  return val_->sequential(first, count);
}

}  // namespace ht::data
