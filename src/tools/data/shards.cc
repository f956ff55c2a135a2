// ht-data shards: text files (or JSON Lines) tokenized in parallel into a set
// of token shards (ht/data/text_corpus.h write_shard_set). One line per shard
// written, then a summary line:
//   shards 3 (train 2, val 1) in DIR | documents 1234 (val 12) | tokens 567890 (val 4321) | uint16 llmc | 2.81 MB text | 0.421 s | 6.67 MB/s | threads 2
#include <cstdio>
#include <limits>
#include <string>

#include "data/data_tool.h"
#include "ht/core/error.h"
#include "ht/data/text_corpus.h"
#include "ht/data/tokenizer.h"

namespace ht::data::tool {
namespace {

struct ShardsArgs {
  std::string tokenizer, out, format = "llmc", jsonl_field = "text";
  std::vector<std::string> inputs;
  std::int64_t shard_tokens = 100'000'000, val_docs = 0, eot = -1;
  double val_fraction = 0;
  int threads = 0;
  bool jsonl = false, no_eot = false, overwrite = false;
  CLI::Option* eot_opt = nullptr;
};

int write_shards(const ShardsArgs& a) {
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(a.tokenizer);
  ShardSetOptions o;
  o.format = a.format == "hypertrain" ? TokenShardFormat::kHypertrain : TokenShardFormat::kLlmc;
  o.shard_tokens = a.shard_tokens;
  o.threads = a.threads;
  if (a.eot_opt->count() > 0) {
    HT_CHECK(a.eot >= 0 && a.eot <= std::numeric_limits<std::int32_t>::max(), ErrorKind::kConfig,
             "--eot {} is not a token id", a.eot);
    o.end_of_text = std::int32_t(a.eot);
  }
  o.no_end_of_text = a.no_eot;
  o.val_documents = a.val_docs;
  o.val_fraction = a.val_fraction;
  o.overwrite = a.overwrite;
  o.text.jsonl = a.jsonl;
  o.text.jsonl_field = a.jsonl_field;
  o.on_shard = [](const std::string& name, std::int64_t tokens) {
    std::printf("# wrote %s: %lld tokens\n", name.c_str(), static_cast<long long>(tokens));
    std::fflush(stdout);
  };
  const ShardSetSummary s = write_shard_set(a.inputs, *tokenizer, a.out, o);
  const double mb = double(s.text_bytes) / 1e6;
  std::printf("shards %lld (train %lld, val %lld) in %s | documents %lld (val %lld) | tokens %lld (val %lld) | "
              "uint%d %s | %.2f MB text | %.3f s | %.2f MB/s | threads %d\n",
              static_cast<long long>(s.shards), static_cast<long long>(s.shards - s.val_shards),
              static_cast<long long>(s.val_shards), a.out.c_str(), static_cast<long long>(s.documents),
              static_cast<long long>(s.val_documents), static_cast<long long>(s.tokens),
              static_cast<long long>(s.val_tokens), 8 * s.token_bytes, a.format.c_str(), mb, s.seconds,
              s.seconds > 0 ? mb / s.seconds : 0.0, s.threads);
  return kOk;
}

}  // namespace

Subcommand add_shards(CLI::App& app) {
  auto a = std::make_shared<ShardsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "shards",
      "tokenize text files or directories (each file a document; or JSON Lines, each line a document) in parallel "
      "into token shards DIR/train_NNNNNN.bin (and val_NNNNNN.bin) with DIR/index.json; documents end with the "
      "tokenizer's end-of-text id");
  cmd->add_option("--tokenizer", a->tokenizer,
                  "'bytes'; a directory with encoder.json (or vocab.json) and vocab.bpe (or merges.txt); a tiktoken "
                  "rank file; or a SentencePiece .model file")
      ->required();
  cmd->add_option("--out", a->out,
                  "directory of the shard set: new, empty, or (--overwrite) a set written before; it appears whole "
                  "when done")
      ->required();
  cmd->add_option("--shard-tokens", a->shard_tokens, "tokens per shard (the last of each split holds the rest)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", a->threads, "tokenizing threads (default: one per hardware thread)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--format", a->format,
                  "llmc: llm.c's header (magic 20240520 uint16, or 20240801 uint32 when the vocabulary exceeds 65536), "
                  "read by llm.c and hypertrain; hypertrain: hypertrain's header with checksums")
      ->capture_default_str()
      ->check(CLI::IsMember({"llmc", "hypertrain"}));
  auto* val_fraction = cmd->add_option("--val-fraction", a->val_fraction,
                                       "the last round(F x documents) documents (at least one) form the validation "
                                       "shards")
                           ->check(CLI::Range(0.0, 0.999999));
  cmd->add_option("--val-docs", a->val_docs, "the last N documents form the validation shards")
      ->check(CLI::NonNegativeNumber)
      ->excludes(val_fraction);
  a->eot_opt = cmd->add_option("--eot", a->eot,
                               "the id written after every document (default: the tokenizer's end-of-text token)");
  cmd->add_flag("--no-eot", a->no_eot, "write no id between documents")->excludes(a->eot_opt);
  cmd->add_flag("--jsonl", a->jsonl, "read every input file as JSON Lines: each line's --jsonl-field is a document");
  cmd->add_option("--jsonl-field", a->jsonl_field, "the field of each JSON Lines object holding the text")
      ->capture_default_str();
  cmd->add_flag("--overwrite", a->overwrite, "replace the shard set --out holds (a directory with index.json)");
  cmd->add_option("inputs", a->inputs,
                  "text files or directories (read recursively, in path order, skipping links, hidden names and "
                  "*.dat)")
      ->required();
  return {cmd, [a] { return write_shards(*a); }};
}

}  // namespace ht::data::tool
