// Tokenizers: text to token ids and back. GPT-2's byte-level BPE (and any
// vocabulary in its format or tiktoken's), SentencePiece models, and the
// byte tokenizer of vocabulary 256. load_tokenizer() picks one from a path.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ht::data {

/// A tokenizer. encode() and decode() are const and may be called from
/// several threads at once (a BPE tokenizer's word cache has its own lock).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// The token ids of `text`, all of it. Text is bytes: the BPE tokenizers
  /// take any bytes (invalid UTF-8 included: each invalid byte is a
  /// character of its own, classed as neither letter, number nor space, and
  /// comes back unchanged from decode()). Special tokens such as
  /// "<|endoftext|>" are not recognised in `text`; append end_of_text() yourself.
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;

  /// The text of `ids`. Throws kInvalidArgument naming the first id outside
  /// [0, vocab_size()).
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;

  /// Ids lie in [0, vocab_size()).
  virtual std::int64_t vocab_size() const = 0;

  /// The end-of-text (end-of-sequence) id, if the vocabulary has one.
  virtual std::optional<std::int32_t> end_of_text() const = 0;

  /// What this is and where it came from: "gpt2-bpe /path/encoder.json + /path/vocab.bpe".
  virtual std::string description() const = 0;
};

/// Loads the tokenizer `path` names:
///   "bytes"                 the byte tokenizer (id = byte value, vocabulary 256,
///                           no end of text), as data::tokenize_bytes;
///   a directory             holding encoder.json (or Hugging Face's vocab.json)
///                           and vocab.bpe (or merges.txt): byte-level BPE as GPT-2;
///                           or holding one SentencePiece tokenizer.model;
///   encoder.json, vocab.json, vocab.bpe or merges.txt
///                           that file and its partner in the same directory;
///   a file of lines "<base64 token> <rank>"  (tiktoken's .tiktoken files):
///                           byte-level BPE by rank with GPT-2's pre-tokenizer,
///                           which is r50k_base's and p50k_base's (cl100k_base and
///                           o200k_base split text otherwise: refused, kNotSupported);
///   a file ending in .model a SentencePiece model (when this build has libsentencepiece).
/// Throws IoError naming the file when it is missing, unreadable or
/// malformed (with the line and what to do), and kNotSupported for a
/// SentencePiece model in a build without SentencePiece.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace ht::data
