// ht::data::TokenBatches: token windows as a DataSource.
#include "ht/data/token_batches.h"

namespace ht::data {

TokenBatches::TokenBatches(const TokenSplits& splits, std::int64_t seq_len) : splits_(splits), seq_len_(seq_len) {
  HT_CHECK(seq_len > 0, ErrorKind::kConfig, "--seq-len must be positive, got {}", seq_len);
}

void TokenBatches::attach(const DataShard& shard) {
  train_ = std::make_unique<BatchSampler>(splits_.train, seq_len_, shard.micro_batch, shard.seed, shard.dp_rank,
                                          shard.dp_size);
  if (has_validation())
    val_ = std::make_unique<BatchSampler>(splits_.val, seq_len_, shard.micro_batch, shard.seed, shard.dp_rank,
                                          shard.dp_size);
}

MicroBatch TokenBatches::next() {
  HT_CHECK(train_, ErrorKind::kInvalidArgument, "TokenBatches: next() before attach()");
  return train_->next();
}

MicroBatch TokenBatches::validation(std::int64_t index) {
  HT_CHECK(val_, ErrorKind::kNotSupported, "TokenBatches: no validation split (or validation() before attach())");
  return val_->sequential(index);
}

ClientState TokenBatches::state() const {
  return {{"position", std::int64_t(train_ ? train_->position() : 0)}};
}

void TokenBatches::restore(const ClientState& state) {
  HT_CHECK(train_, ErrorKind::kInvalidArgument, "TokenBatches: restore() before attach()");
  const auto it = state.find("position");
  HT_CHECK(it != state.end() && std::holds_alternative<std::int64_t>(it->second) &&
               std::get<std::int64_t>(it->second) >= 0,
           ErrorKind::kCorruption,
           "the checkpoint's data state has no valid 'position' for the token sampler; it was saved by another "
           "kind of data source");
  train_->set_position(std::uint64_t(std::get<std::int64_t>(it->second)));
}

}  // namespace ht::data
