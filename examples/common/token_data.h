// What the bundled language-model programs (gpt_train, llama_train) share
// beyond the library: a token file prepared from text on rank 0 first (by
// bytes, or by any tokenizer of ht/data/tokenizer.h), or token shards read
// as they are, and a sample from the trained model at the end, decoded by
// the same tokenizer.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ht/data/data_source.h"
#include "ht/data/token_batches.h"
#include "ht/data/tokenizer.h"
#include "ht/models/causal_lm.h"
#include "ht/models/model_flags.h"
#include "ht/train/engine.h"
#include "ht/train/flags.h"
#include "ht/train/job.h"

namespace ht::examples {

/// Where the examples look for a corpus by default: the `fortunes` package's text files.
inline constexpr const char* kDefaultCorpusDir = "/usr/share/games/fortunes";

/// What the programs train on: the tokenizer, and the samples (a token
/// file's splits, or token shards).
struct TokenData {
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<data::TokenSplits> splits;  // the token file's; none with --shards
  std::unique_ptr<data::DataSource> source;   // TokenBatches over `splits`, or ShardBatches
};

struct TokenDataFlags {
  std::string data;               // token file; default <run-dir>/tokens.h5
  std::vector<std::string> text;  // text inputs to tokenise; default the fortunes corpus
  std::string tokenizer = "bytes";  // what data::load_tokenizer takes
  std::string shards, val_shards;   // token shard specs (a blend for training); replace the token file
  bool document_mask = false;       // attention within documents only (data::ShardBatchesOptions::document_ids)
  double val_fraction = 0.05;
  bool prepare_only = false;
  std::int64_t seq_len = 128;

  void add_to(CLI::App& app);
  /// The tokenizer (--tokenizer, on every rank), and either the token
  /// shards of --shards / --val-shards (data::ShardBatches, documents ended
  /// by the tokenizer's end of text) or the token file (--data, or
  /// <run-dir>/tokens.h5), prepared from --text (or the default corpus) by
  /// rank 0 first when asked or missing, read on every rank; rank 0 prints a
  /// "# data" line. A token file remembers the text and the tokenizer it
  /// was made from (<file>.inputs) and is made again when either changes.
  /// Throws kIo for a named --data that does not exist (a typo must not
  /// train on the default corpus), kConfig when the tokenizer's or the
  /// data's vocabulary exceeds `vocab_size`, shards hold ids the tokenizer
  /// does not, or --seq-len exceeds the model's `context`.
  TokenData load(train::Job& job, std::int64_t vocab_size, std::int64_t context) const;
};

struct SampleFlags {
  int tokens = 200;
  float temperature = 0.8f;
  std::string prompt = "The ";

  void add_to(CLI::App& app);
  /// Gathers the trained model onto rank 0 (collective), loads it into
  /// `make_whole()` (the model of one process) and prints a sample there:
  /// the prompt encoded by `tokenizer`, continued, decoded by it. With the
  /// byte tokenizer every byte is shown as escape_unprintable shows it;
  /// with another, UTF-8 text is kept (escape_unprintable's keep_utf8) and
  /// an id the tokenizer cannot decode shows as "<|id N|>".
  void print(train::Engine& engine, train::Job& job, const data::Tokenizer& tokenizer,
             const std::function<std::unique_ptr<models::CausalLM>()>& make_whole) const;
};

/// `bytes` as they may be shown on a terminal: printable ASCII, '\n' and '\t'
/// as they are, a backslash as "\\", every other byte as "\xNN" (lower-case
/// hex), so that a sampled control byte never reaches the terminal raw. With
/// `keep_utf8`, a well-formed UTF-8 sequence of a character from U+00A0 on
/// is kept as it is too (the C1 controls U+0080..U+009F and ill-formed
/// bytes are still escaped).
std::string escape_unprintable(std::string_view bytes, bool keep_utf8 = false);

/// What gpt_train and llama_train do once their flags are parsed: resolve
/// the model's flags (a bad preset or size ends the job with its message),
/// describe the model for --auto and --dry-run, prepare the token data,
/// build the model on the engine, fit (the run policy of ht/train/run.h) and
/// print a sample. Returns the process's exit code (train::run_job).
int train_language_model(const char* program, train::TrainFlags& flags, const TokenDataFlags& data,
                         const SampleFlags& sample, const models::ModelFlags& model);

}  // namespace ht::examples
