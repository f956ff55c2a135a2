// ht::data::ShardBatches: next-token training windows from token shards
// (llm.c, nanoGPT or hypertrain's; token_shard.h), one corpus or a weighted
// blend of several, as a DataSource for language models.
//
// Samples are addressed as TokenBatches addresses them (data_source.h):
// training sample i comes from blend part p = TokenBlend::part(i) (always 0
// for one corpus) and is the window of seq_len + 1 tokens of that corpus
// starting at random_window_start(seed, i, corpus tokens, seq_len): input
// the first seq_len, target the last seq_len. Validation sample i is the
// i-th consecutive window of the validation corpus. A corpus is its shards
// read as one sequence, so a window may span two shards and the same tokens
// cut into other shards give the same samples; one corpus gives exactly the
// samples TokenBatches gives for the same tokens. Nothing but the engine's
// consumed samples is a position: a checkpoint resumes on any layout.
//
// Documents: with eot_token set, a document ends at that token and the next
// begins after it (Megatron's convention). With document_ids on, each
// micro-batch carries side[kDocumentIdsSide], (B, T) i32: row b's t-th
// input token belongs to the document numbered by the end-of-text tokens
// before it in the row (0, 1, ...; the end-of-text token itself belongs to
// the document it ends); a query may attend to a key only of its own
// number. nn::CausalSelfAttention (GPT) and nn::SelfAttention (Llama) read
// it and mask attention across documents (Megatron's reset_attention_mask);
// positions stay those of the row (position ids are not reset per
// document), and the loss still counts every target, the first token of the
// next document after an end-of-text included. Context parallelism refuses
// it (the engine refuses side inputs under --cp).
//
// Shards are mapped and a window reads only its own tokens. Not thread-safe
// (the DataSource contract: called from the training thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ht/data/data_source.h"
#include "ht/data/token_blend.h"
#include "ht/data/token_corpus.h"

namespace ht::data {

struct ShardBatchesOptions {
  std::int64_t seq_len = 1024;
  /// The end-of-text id that ends a document (GPT-2's is 50256); -1: none.
  std::int64_t eot_token = -1;
  /// Give side[kDocumentIdsSide] with every micro-batch (needs eot_token).
  bool document_ids = false;
  /// When > 0, every id of a window must be below it (kInvalidArgument
  /// naming the corpus and the position otherwise): a shard of another
  /// tokenizer is refused instead of indexing past the embedding.
  std::int64_t vocab_size = 0;
};

class ShardBatches : public DataSource {
 public:
  /// `train`: a blend spec (token_blend.h parse_blend; one corpus is a blend
  /// of one part); `val`: a shard spec, or empty for no validation. Opens
  /// every shard. Throws kConfig for bad options, IoError for a bad shard,
  /// kInvalidArgument when a corpus is too short for one window.
  ShardBatches(const std::string& train, const std::string& val, const ShardBatchesOptions& options);
  /// The same from opened corpora: `train` parts with their weights.
  ShardBatches(std::vector<std::pair<double, TokenCorpus>> train, std::optional<TokenCorpus> val,
               const ShardBatchesOptions& options);

  void attach(const DataShard& shard) override;
  MicroBatch samples(std::int64_t first, std::int64_t count) override;
  bool has_validation() const override { return val_.has_value(); }
  MicroBatch validation_samples(std::int64_t first, std::int64_t count) override;

  /// The blend part training sample `sample` comes from (after attach).
  int part_of(std::int64_t sample) const;
  int parts() const { return int(train_.size()); }
  const TokenCorpus& corpus(int part) const { return train_.at(std::size_t(part)).second; }
  const ShardBatchesOptions& options() const { return options_; }

 private:
  MicroBatch make(const std::vector<std::pair<const TokenCorpus*, std::int64_t>>& windows) const;

  std::vector<std::pair<double, TokenCorpus>> train_;
  std::optional<TokenCorpus> val_;
  ShardBatchesOptions options_;
  std::optional<TokenBlend> blend_;
  std::uint64_t seed_ = 0;
};

}  // namespace ht::data
