// ht::data::ShardBatches: windows of token shards and blends as a DataSource.
#include "ht/data/shard_batches.h"

#include "ht/core/error.h"
#include "ht/data/token_windows.h"

namespace ht::data {

namespace {

std::vector<std::pair<double, TokenCorpus>> open_blend(const std::string& spec) {
  std::vector<std::pair<double, TokenCorpus>> parts;
  for (const BlendPart& p : parse_blend(spec)) parts.emplace_back(p.weight, TokenCorpus::open(p.shards));
  return parts;
}

std::optional<TokenCorpus> open_optional(const std::string& spec) {
  if (spec.empty()) return std::nullopt;
  return TokenCorpus::open(spec);
}

void check_length(const TokenCorpus& c, std::int64_t seq_len, std::string_view what) {
  HT_CHECK_ARG(c.size() > seq_len,
               "{} corpus of {} is too short for one window of {} + 1 tokens; give more shards or a shorter --seq-len",
               what, c.describe(), seq_len);
}

}  // namespace

ShardBatches::ShardBatches(const std::string& train, const std::string& val, const ShardBatchesOptions& options)
    : ShardBatches(open_blend(train), open_optional(val), options) {}

ShardBatches::ShardBatches(std::vector<std::pair<double, TokenCorpus>> train, std::optional<TokenCorpus> val,
                           const ShardBatchesOptions& options)
    : train_(std::move(train)), val_(std::move(val)), options_(options) {
  HT_CHECK(options.seq_len > 0, ErrorKind::kConfig, "--seq-len must be positive, got {}", options.seq_len);
  HT_CHECK(!options.document_ids || options.eot_token >= 0, ErrorKind::kConfig,
           "document ids need the end-of-text token's id (ShardBatchesOptions::eot_token)");
  HT_CHECK(!train_.empty(), ErrorKind::kConfig, "token shards: no training corpus");
  for (const auto& [w, c] : train_) check_length(c, options.seq_len, "training");
  if (val_) check_length(*val_, options.seq_len, "validation");
  std::vector<double> weights;
  for (const auto& [w, c] : train_) weights.push_back(w);
  blend_.emplace(weights, 0);  // checks the weights now; attach() reseeds it
}

void ShardBatches::attach(const DataShard& shard) {
  seed_ = shard.seed;
  std::vector<double> weights;
  for (const auto& [w, c] : train_) weights.push_back(w);
  blend_.emplace(weights, seed_);
}

int ShardBatches::part_of(std::int64_t sample) const { return train_.size() == 1 ? 0 : blend_->part(sample); }

MicroBatch ShardBatches::samples(std::int64_t first, std::int64_t count) {
  HT_CHECK_ARG(first >= 0 && count >= 0, "token shards: samples [{}, {}) are not a range of sample indices", first,
               first + count);
  std::vector<std::pair<const TokenCorpus*, std::int64_t>> windows;
  for (std::int64_t i = first; i < first + count; ++i) {
    const TokenCorpus& c = train_[std::size_t(part_of(i))].second;
    windows.emplace_back(&c, random_window_start(seed_, i, c.size(), options_.seq_len));
  }
  return make(windows);
}

MicroBatch ShardBatches::validation_samples(std::int64_t first, std::int64_t count) {
  HT_CHECK(val_, ErrorKind::kNotSupported,
           "token shards: no validation shards were given; give them or turn validation off (--eval-samples 0)");
  HT_CHECK_ARG(first >= 0 && count >= 0, "token shards: validation samples [{}, {}) are not a range", first,
               first + count);
  std::vector<std::pair<const TokenCorpus*, std::int64_t>> windows;
  for (std::int64_t i = first; i < first + count; ++i)
    windows.emplace_back(&*val_, sequential_window_start(i, val_->size(), options_.seq_len));
  return make(windows);
}

MicroBatch ShardBatches::make(const std::vector<std::pair<const TokenCorpus*, std::int64_t>>& windows) const {
  const std::int64_t b = std::int64_t(windows.size()), t = options_.seq_len;
  MicroBatch out;
  out.input = Tensor::empty({b, t}, DType::kI32, Device::cpu(), MemCategory::kActivations);
  out.target = Tensor::empty({b, t}, DType::kI32, Device::cpu(), MemCategory::kActivations);
  Tensor docs;
  if (options_.document_ids) docs = Tensor::empty({b, t}, DType::kI32, Device::cpu(), MemCategory::kActivations);
  std::vector<std::int32_t> row(std::size_t(t + 1));
  for (std::int64_t r = 0; r < b; ++r) {
    const auto& [corpus, start] = windows[std::size_t(r)];
    corpus->read(start, t + 1, row.data());
    if (options_.vocab_size > 0)
      for (std::int64_t k = 0; k <= t; ++k)
        HT_CHECK_ARG(row[std::size_t(k)] < options_.vocab_size,
                     "token {} of corpus {} is id {}, outside the model's vocabulary of {} (shards of another "
                     "tokenizer?)",
                     start + k, corpus->describe(), row[std::size_t(k)], options_.vocab_size);
    std::copy(row.begin(), row.end() - 1, out.input.data<std::int32_t>() + r * t);
    std::copy(row.begin() + 1, row.end(), out.target.data<std::int32_t>() + r * t);
    if (docs.defined()) {
      // A document ends at its end-of-text token: the token after it is the
      // next document's first.
      std::int32_t doc = 0;
      std::int32_t* d = docs.data<std::int32_t>() + r * t;
      for (std::int64_t k = 0; k < t; ++k) {
        d[k] = doc;
        if (row[std::size_t(k)] == options_.eot_token) ++doc;
      }
    }
  }
  if (docs.defined()) out.side[std::string(kDocumentIdsSide)] = docs;
  return out;
}

}  // namespace ht::data
