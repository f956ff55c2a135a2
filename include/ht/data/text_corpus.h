// Text corpora tokenized in parallel: the documents of text files or JSON
// Lines files, encoded by one pool of threads and handed over in document
// order, so that what comes out is the same whatever the thread count; the
// token arrays gpt_train makes from --text (tokenize_text); and the sets of
// token shards `ht-data shards` writes (write_shard_set).
//
// A document is a whole text file, or in JSON Lines mode the "text" field of
// one line. Work is cut into pieces: a text file is one piece, a JSON Lines
// file is cut at line ends into pieces of about TextCorpusOptions::piece_bytes
// (the cut depends on the file alone). Workers claim pieces in order, read
// and encode them; the calling thread takes the results in piece order. A
// single large text file is one document and so one piece: it is encoded on
// one thread (give many files, or JSON Lines, to use many).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ht/data/token_dataset.h"
#include "ht/data/token_shard.h"
#include "ht/data/tokenizer.h"

namespace ht::data {

/// The files of `inputs`, in order: a file as named (a link is followed); a
/// directory's regular files, recursively, in path order, skipping links,
/// hidden names (".git", ".cache", ...) and fortune index files (*.dat).
/// Throws IoError naming an input that does not exist, is neither a file nor
/// a directory, or is a directory without such files; kInvalidArgument when
/// `inputs` is empty.
std::vector<std::string> list_text_files(const std::vector<std::string>& inputs);

struct TextCorpusOptions {
  /// Read every file as JSON Lines: each line that is not blank is a JSON
  /// object whose `jsonl_field` (a string) is one document.
  bool jsonl = false;
  std::string jsonl_field = "text";
  /// JSON Lines: lines are grouped into pieces of about this many bytes.
  std::int64_t piece_bytes = std::int64_t(1) << 20;
};

/// One unit of work: a whole text file (one document) or a run of whole
/// lines of a JSON Lines file (one document per line that is not blank).
struct TextPiece {
  std::string path;
  std::int64_t offset = 0;      // byte offset in the file
  std::int64_t bytes = 0;       // bytes of the file it covers
  std::int64_t first_line = 0;  // JSON Lines: the 1-based line number of its first line
  std::int64_t documents = 1;
};

class TextCorpus {
 public:
  /// Lists the files of `inputs` (list_text_files) and, in JSON Lines mode,
  /// reads them once to cut them into pieces and count their documents.
  /// Throws IoError for an unreadable file.
  static TextCorpus open(const std::vector<std::string>& inputs, const TextCorpusOptions& options = {});

  const std::vector<TextPiece>& pieces() const { return pieces_; }
  const TextCorpusOptions& options() const { return options_; }
  std::int64_t documents() const { return documents_; }
  /// Bytes of all the files.
  std::int64_t bytes() const { return bytes_; }
  std::int64_t files() const { return files_; }

  /// The documents of piece `i`, read from disk. Throws IoError for an
  /// unreadable file, and in JSON Lines mode for a line that is not a JSON
  /// object with a string `jsonl_field` (naming the file and line).
  std::vector<std::string> read(std::size_t i) const;

 private:
  std::vector<TextPiece> pieces_;
  TextCorpusOptions options_;
  std::int64_t documents_ = 0, bytes_ = 0, files_ = 0;
};

/// The threads of `threads` (0: the machine's hardware threads, at least 1).
int resolve_threads(int threads);

struct EncodeOptions {
  int threads = 0;  // workers; 0: resolve_threads(0)
  /// Appended after every document; none when empty.
  std::optional<std::int32_t> end_of_text;
  /// Pieces encoded ahead of the one the sink waits for (bounds memory);
  /// 0: 4 per thread.
  int pieces_ahead = 0;
};

/// The documents of one piece, encoded.
struct EncodedPiece {
  std::size_t piece = 0;
  std::int64_t first_document = 0;  // index of its first document in the corpus
  std::vector<std::int32_t> tokens;   // its documents' ids, each followed by the end of text if asked
  std::vector<std::int64_t> ends;     // where each document's tokens end in `tokens` (after its end of text)
};

/// Encodes every document of `corpus` with `tokenizer` on a pool of
/// `options.threads` workers and calls `sink` with each piece, in piece
/// order, on the calling thread: the calls are the same whatever the thread
/// count. The first error in piece order (an unreadable file, a bad line)
/// or the sink's own stops the pool and is rethrown here.
void encode_corpus(const TextCorpus& corpus, const Tokenizer& tokenizer, const EncodeOptions& options,
                   const std::function<void(EncodedPiece&&)>& sink);

/// gpt_train's token arrays from text with any tokenizer: the files of
/// `inputs` (list_text_files), each a document encoded by `tokenizer` (on
/// `threads` threads) and followed by its end of text when it has one, in
/// order; the last `val_fraction` of the tokens form the validation split;
/// vocab_size is the tokenizer's. Throws as list_text_files, and
/// kInvalidArgument when there are too few tokens for both splits.
TokenSplits tokenize_text(const Tokenizer& tokenizer, const std::vector<std::string>& inputs, double val_fraction,
                          int threads = 0);

inline constexpr const char* kShardSetIndex = "index.json";

struct ShardSetOptions {
  /// kLlmc (llm.c's header: llm.c's and nanoGPT-style loaders read it) or kHypertrain.
  TokenShardFormat format = TokenShardFormat::kLlmc;
  /// Tokens per shard (the last of each split holds the rest); documents
  /// run on from one shard into the next, as in llm.c's fineweb.py.
  std::int64_t shard_tokens = 100'000'000;
  int threads = 0;  // 0: resolve_threads(0)
  /// The id written after every document. Without one, the tokenizer's end
  /// of text; a tokenizer without one is refused unless `no_end_of_text`.
  std::optional<std::int32_t> end_of_text;
  bool no_end_of_text = false;
  /// Validation: the last `val_documents` documents, or the last
  /// round(val_fraction x documents) of them (at least one); none when both are 0.
  std::int64_t val_documents = 0;
  double val_fraction = 0;
  /// Replace an out directory that holds a shard set already.
  bool overwrite = false;
  TextCorpusOptions text;
  /// Called on the calling thread after each shard is written: its file name and tokens.
  std::function<void(const std::string& name, std::int64_t tokens)> on_shard;
};

struct ShardSetSummary {
  std::int64_t documents = 0, val_documents = 0;
  std::int64_t tokens = 0, val_tokens = 0;
  std::int64_t shards = 0, val_shards = 0;
  std::int64_t text_bytes = 0;  // bytes of the input files
  int token_bytes = 2;
  int threads = 1;
  double seconds = 0;
};

/// Tokenizes `inputs` (TextCorpus) with `tokenizer` into a set of token
/// shards in `out_dir`: train_000000.bin, train_000001.bin, ... and, with a
/// validation split, val_000000.bin, ...; each document's ids are followed
/// by the end-of-text id; ids are uint16 when the vocabulary has at most
/// 65536 ids, else uint32. Last, index.json describes the set: format,
/// token width, tokenizer, end of text, documents, and every shard with its
/// token count. The bytes written depend on the inputs, the tokenizer and
/// the options, never on the thread count.
///
/// The set appears whole or not at all: it is written into a hidden
/// directory beside `out_dir` (".<name>.partial", removed first if a crash
/// left one) and renamed to `out_dir` when complete. `out_dir` must not
/// exist, or be an empty directory, or (with `overwrite`) hold a set this
/// function wrote (its index.json): anything else is refused, nothing being
/// deleted. Throws kConfig for bad options or a tokenizer without an end of
/// text, IoError naming a missing input, an unwritable directory or a bad
/// file, kInvalidArgument for an id outside the vocabulary.
ShardSetSummary write_shard_set(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                                const std::string& out_dir, const ShardSetOptions& options);

}  // namespace ht::data
