// Token datasets on disk: one HDF5 file with a "train" and a "val" split of
// token ids (uint16) and the vocabulary size as an attribute. Readable with
// h5py or h5dump.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ht::data {

struct TokenSplits {
  std::vector<std::int32_t> train;
  std::vector<std::int32_t> val;
  std::int64_t vocab_size = 0;
};

/// Writes `splits` to `path` (replacing it). Written to "<path>.tmp" and
/// renamed, so a crash never leaves a half-written file under `path`.
/// Throws IoError, or kInvalidArgument for ids outside [0, vocab_size) or a vocab over 65536.
void write_token_file(const std::string& path, const TokenSplits& splits);

/// Reads a token file. Throws IoError naming the path when it is missing or
/// not a token file, and kInvalidArgument when a split is empty or an id is
/// outside the vocabulary.
TokenSplits read_token_file(const std::string& path);

/// Byte-level tokenisation (vocab 256) of the text files `inputs`:
/// tokenize_text (text_corpus.h) with the byte tokenizer, which adds no end
/// of text, so the files' bytes in list_text_files' order. The last
/// `val_fraction` of them form the validation split. Throws IoError for
/// unreadable inputs and kInvalidArgument when there are too few bytes for
/// both splits.
TokenSplits tokenize_bytes(const std::vector<std::string>& inputs, double val_fraction);

/// `tokens` cut into a train split and, the last val_fraction of them, a
/// validation split, of vocabulary `vocab_size`: what tokenize_text
/// (text_corpus.h) ends with. `made_of` says what the tokens
/// are in the error ("bytes", "tokens of gpt2-bpe ..."). Throws
/// kInvalidArgument when either split would hold fewer than 2 tokens.
TokenSplits split_tail(std::vector<std::int32_t> tokens, double val_fraction, std::int64_t vocab_size,
                       const std::string& made_of);

/// The unigram entropy (nats per token) of a token array: the loss of the best
/// model that ignores context; a trained model should end well below it.
double unigram_entropy(const std::vector<std::int32_t>& tokens, std::int64_t vocab_size);

}  // namespace ht::data
