// Token data and sampling for the bundled language-model programs.
#include "examples/common/token_data.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "ht/core/rng.h"
#include "ht/core/version.h"
#include "ht/data/shard_batches.h"
#include "ht/data/text_corpus.h"
#include "ht/models/hf_format.h"
#include "ht/parallel/gather_parameters.h"

namespace ht::examples {

namespace fs = std::filesystem;

namespace {

bool is_bytes(const data::Tokenizer& tokenizer) { return tokenizer.description() == "bytes"; }

// What a token file is made from: every input file's path, size and
// modification time (those data::list_text_files reads), the validation
// share, and the tokenizer (unless it is the byte tokenizer) with its
// files'. Kept beside the file as
// <file>.inputs, so that a relaunch with the same --text and --tokenizer
// (htrun's) reads the file instead of tokenising the corpus again.
std::string inputs_signature(const std::vector<std::string>& inputs, double val_fraction,
                             const data::Tokenizer& tokenizer, const std::string& tokenizer_path) {
  std::ostringstream s;
  s << "val_fraction " << val_fraction << "\n";
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    s << fs::absolute(p).string() << " " << fs::file_size(p, ec) << " "
      << fs::last_write_time(p, ec).time_since_epoch().count() << "\n";
  };
  if (!is_bytes(tokenizer)) {
    s << "tokenizer " << tokenizer.description() << " vocab " << tokenizer.vocab_size() << " end_of_text "
      << tokenizer.end_of_text().value_or(-1) << "\n";
    // A directory, or one file of a BPE pair (its partner and tokenizer.json
    // are read beside it): every file there, any may be what it reads.
    std::error_code ec;
    const fs::path p(tokenizer_path);
    const std::string name = p.filename().string();
    const bool pair_file =
        name == "encoder.json" || name == "vocab.json" || name == "vocab.bpe" || name == "merges.txt";
    const fs::path dir = fs::is_directory(p, ec) ? p : pair_file ? (p.has_parent_path() ? p.parent_path() : ".") : "";
    if (dir.empty()) {
      add(p);
    } else {
      std::vector<fs::path> files;
      for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir, ec))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) add(f);
    }
    s << "text\n";
  }
  for (const std::string& file : data::list_text_files(inputs)) add(file);  // the files the tokenizer reads
  return s.str();
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return in ? s.str() : std::string();
}

// " (tokenizer gpt2-bpe ...)" for the data line; nothing for the byte tokenizer.
std::string tokenizer_note(const data::Tokenizer& tokenizer) {
  return is_bytes(tokenizer) ? std::string() : " (tokenizer " + tokenizer.description() + ")";
}

// The model's vocabulary must hold the tokenizer's ids.
void check_tokenizer_vocab(const data::Tokenizer& tokenizer, std::int64_t vocab_size) {
  const std::int64_t v = tokenizer.vocab_size();
  HT_CHECK(v <= vocab_size, ErrorKind::kConfig,
           "the tokenizer's vocabulary ({}, {}) is larger than the model's vocab_size ({}): pass --vocab {} (with "
           "--vocab-multiple 128 the embedding and head are stored padded to a multiple of 128, GPT-2's 50257 as "
           "50304), or a --preset of that vocabulary",
           v, tokenizer.description(), vocab_size, v);
}

// Shards made by another tokenizer are refused before training: a
// hypertrain shard's recorded vocabulary must be the tokenizer's, and the
// first tokens of the corpus (up to 4M, returned) must be its ids.
std::vector<std::int32_t> check_corpus(const data::TokenCorpus& corpus, const data::Tokenizer& tokenizer) {
  const std::int64_t v = tokenizer.vocab_size();
  for (const data::TokenShard& shard : corpus.shards())
    HT_CHECK(shard.header().vocab_size == 0 || shard.header().vocab_size == v, ErrorKind::kConfig,
             "token shard '{}' was written for a vocabulary of {}, but --tokenizer {} has {}: pass the tokenizer "
             "the shards were made with",
             shard.path(), shard.header().vocab_size, tokenizer.description(), v);
  std::vector<std::int32_t> head(std::size_t(std::min<std::int64_t>(corpus.size(), std::int64_t(1) << 22)));
  corpus.read(0, std::int64_t(head.size()), head.data());
  for (std::size_t i = 0; i < head.size(); ++i)
    HT_CHECK(head[i] < v, ErrorKind::kConfig,
             "token {} of {} is id {}, outside the vocabulary of --tokenizer {} ({} ids): pass the tokenizer the "
             "shards were made with",
             i, corpus.describe(), head[i], tokenizer.description(), v);
  return head;
}

}  // namespace

void TokenDataFlags::add_to(CLI::App& app) {
  CLI::Option* data_opt =
      app.add_option("--data", data, "HDF5 token file (default <run-dir>/tokens.h5; created if missing)");
  CLI::Option* text_opt = app.add_option(
      "--text", text,
      "text files or directories to tokenise into --data (default: " + std::string(kDefaultCorpusDir) + ")");
  app.add_option("--tokenizer", tokenizer,
                 "how text becomes tokens, and the sample text again: 'bytes' (one id a byte, vocabulary 256); a "
                 "directory with encoder.json (or vocab.json) and vocab.bpe (or merges.txt), GPT-2's BPE; a tiktoken "
                 "rank file; a SentencePiece .model file. Each --text file is a document, followed by the "
                 "tokenizer's end-of-text id")
      ->capture_default_str();
  CLI::Option* val_opt =
      app.add_option("--val-fraction", val_fraction, "fraction of the text kept for validation")
          ->check(CLI::Range(0.001, 0.5));
  CLI::Option* shards_opt =
      app.add_option("--shards", shards,
                     "train on token shards instead of a token file (llm.c's, nanoGPT's raw-uint16:PATH, "
                     "hypertrain's; `ht-data shards` writes them): paths and globs, comma-separated, or a blend "
                     "'0.7:a/*.bin,0.3:b/*.bin'; documents end at the --tokenizer's end-of-text id")
          ->excludes(data_opt)
          ->excludes(text_opt)
          ->excludes(val_opt);
  app.add_option("--val-shards", val_shards, "token shards for validation (paths and globs; with --shards)")
      ->needs(shards_opt);
  app.add_flag("--document-mask", document_mask,
               "with --shards: a token attends only to tokens of its own document (documents end at the "
               "tokenizer's end-of-text id); positions stay those of the window")
      ->needs(shards_opt);
  app.add_flag("--prepare-only", prepare_only, "write the token file and stop");
  app.add_option("--seq-len", seq_len, "tokens per sequence");
}

TokenData TokenDataFlags::load(train::Job& job, std::int64_t vocab_size, std::int64_t context) const {
  HT_CHECK(seq_len > 0 && seq_len <= context, ErrorKind::kConfig,
           "--seq-len {} must lie in [1, context={}]; raise --context or shorten --seq-len", seq_len, context);
  TokenData out;
  out.tokenizer = data::load_tokenizer(tokenizer);
  const data::Tokenizer& tok = *out.tokenizer;
  if (!is_bytes(tok) || !shards.empty()) check_tokenizer_vocab(tok, vocab_size);

  if (!shards.empty()) {
    std::vector<std::pair<double, data::TokenCorpus>> parts;
    for (const data::BlendPart& part : data::parse_blend(shards))
      parts.emplace_back(part.weight, data::TokenCorpus::open(part.shards));
    std::optional<data::TokenCorpus> val;
    if (!val_shards.empty()) val = data::TokenCorpus::open(val_shards);
    std::vector<std::int32_t> head;  // validation tokens if any, else training tokens: for the unigram entropy
    std::string train_desc;
    for (const auto& [weight, corpus] : parts) {
      std::vector<std::int32_t> h = check_corpus(corpus, tok);
      if (head.empty()) head = std::move(h);
      train_desc += (train_desc.empty() ? "" : " + ") +
                    (parts.size() > 1 ? fmt::format("{} x ", weight) : std::string()) + corpus.describe();
    }
    if (val) head = check_corpus(*val, tok);
    const std::optional<std::int32_t> eot = tok.end_of_text();
    if (job.rank0())
      std::printf("# %s\n# data shards: train %s; %s; vocab %lld%s, end of text %s, unigram entropy %.4f nats\n",
                  build_description().c_str(), train_desc.c_str(),
                  val ? ("val " + val->describe()).c_str() : "no validation", (long long)tok.vocab_size(),
                  tokenizer_note(tok).c_str(), eot ? std::to_string(*eot).c_str() : "none",
                  data::unigram_entropy(head, tok.vocab_size()));
    out.source = std::make_unique<data::ShardBatches>(
        std::move(parts), std::move(val),
        data::ShardBatchesOptions{.seq_len = seq_len,
                                  .eot_token = eot.value_or(-1),
                                  .document_ids = document_mask,
                                  .vocab_size = vocab_size});
    return out;
  }

  const std::string path = data.empty() ? (fs::path(job.options().run_dir) / "tokens.h5").string() : data;
  data::TokenSplits splits;
  job.rank0_first("preparing the token file '" + path + "'", [&] {
    if (!job.rank0()) {
      splits = data::read_token_file(path);
      return;
    }
    HT_CHECK(data.empty() || !text.empty() || fs::exists(path), ErrorKind::kIo,
             "token file '{}' (--data) does not exist; pass --text FILES to create it, or omit --data to use "
             "<run-dir>/tokens.h5 prepared from {}",
             path, kDefaultCorpusDir);
    if (!text.empty() || !fs::exists(path)) {
      const std::vector<std::string> inputs = text.empty() ? std::vector<std::string>{kDefaultCorpusDir} : text;
      const std::string signature = inputs_signature(inputs, val_fraction, tok, tokenizer),
                        recorded = path + ".inputs";
      if (fs::exists(path) && read_whole(recorded) == signature) {
        std::printf("# reusing %s: made from the same %zu text input(s)\n", path.c_str(), inputs.size());
      } else {
        std::printf("# preparing %s from %zu text input(s): %s%s%s\n", path.c_str(), inputs.size(),
                    inputs.front().c_str(), inputs.size() > 1 ? ", ..." : "",
                    is_bytes(tok) ? "" : (" with " + tok.description()).c_str());
        HT_CHECK(tok.vocab_size() <= 65536, ErrorKind::kConfig,
                 "the tokenizer's vocabulary ({}) does not fit the token file's uint16 ids: write shards with "
                 "`ht-data shards --tokenizer {} --out DIR --val-fraction {} TEXT...` and train with --shards "
                 "'DIR/train_*.bin' --val-shards 'DIR/val_*.bin'",
                 tok.vocab_size(), tokenizer, val_fraction);
        std::error_code ec;
        fs::remove(recorded, ec);  // no stale record beside a new file, should the write fail
        data::write_token_file(path, data::tokenize_text(tok, inputs, val_fraction));
        std::ofstream(recorded + ".tmp") << signature;
        fs::rename(recorded + ".tmp", recorded, ec);
      }
    }
    splits = data::read_token_file(path);
  });
  if (job.rank0())
    std::printf("# %s\n# data %s: %zu train / %zu val tokens, vocab %lld%s, unigram entropy %.4f nats\n",
                build_description().c_str(), path.c_str(), splits.train.size(), splits.val.size(),
                (long long)splits.vocab_size, tokenizer_note(tok).c_str(),
                data::unigram_entropy(splits.val, splits.vocab_size));
  HT_CHECK(splits.vocab_size <= vocab_size, ErrorKind::kConfig,
           "the dataset's vocabulary ({}) is larger than the model's vocab_size ({}); raise --vocab", splits.vocab_size,
           vocab_size);
  HT_CHECK(is_bytes(tok) || splits.vocab_size == tok.vocab_size(), ErrorKind::kConfig,
           "token file '{}' holds ids of a vocabulary of {}, but --tokenizer {} has {}: pass the tokenizer it was "
           "made with, or --text to make it again",
           path, splits.vocab_size, tok.description(), tok.vocab_size());
  out.splits = std::make_unique<data::TokenSplits>(std::move(splits));
  out.source = std::make_unique<data::TokenBatches>(*out.splits, seq_len);
  return out;
}

void SampleFlags::add_to(CLI::App& app) {
  app.add_option("--sample-tokens", tokens, "tokens (bytes, with the byte tokenizer) to sample at the end (0: none)");
  app.add_option("--temperature", temperature, "sampling temperature (0: greedy)");
  app.add_option("--prompt", prompt, "text the sample starts from");
}

namespace {

// The text of `ids` for a terminal: an id the tokenizer cannot decode (one
// of a model's vocabulary larger than the tokenizer's) shows as "<|id N|>"
// and the runs between such ids are decoded whole.
std::string decode_for_display(const data::Tokenizer& tokenizer, const std::vector<std::int32_t>& ids) {
  try {
    return tokenizer.decode(ids);
  } catch (const Error&) {
  }
  std::string text;
  std::vector<std::int32_t> run;
  const auto flush = [&] {
    if (!run.empty()) text += tokenizer.decode(run);
    run.clear();
  };
  for (const std::int32_t id : ids) {
    try {
      tokenizer.decode(std::span<const std::int32_t>(&id, 1));
      run.push_back(id);
    } catch (const Error&) {
      flush();
      text += fmt::format("<|id {}|>", id);
    }
  }
  flush();
  return text;
}

// The bytes of a well-formed UTF-8 sequence at `s[i]` of a character from
// U+00A0 on, else 0.
std::size_t printable_utf8(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  const std::size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  char32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  const char32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp < 0xA0) return 0;
  return n;
}

}  // namespace

void SampleFlags::print(train::Engine& engine, train::Job& job, const data::Tokenizer& tokenizer,
                        const std::function<std::unique_ptr<models::CausalLM>()>& make_whole) const {
  if (tokens <= 0) return;
  const auto full = engine.full_parameters();
  if (!job.rank0()) return;
  std::unique_ptr<models::CausalLM> whole = make_whole();
  parallel::load_full_parameters(*whole, full);
  Rng rng(engine.options().seed);
  std::vector<std::int32_t> ids = tokenizer.encode(prompt);
  const bool seeded = ids.empty() && tokenizer.end_of_text().has_value();  // no prompt: start a document
  if (seeded) ids.push_back(*tokenizer.end_of_text());
  const std::vector<std::int32_t> generated = whole->generate(ids, tokens, temperature, rng);
  ids.insert(ids.end(), generated.begin(), generated.end());
  if (seeded) ids.erase(ids.begin());
  // Bytes are shown as they are, escaped; a tokenizer's text keeps its
  // UTF-8. An id past the tokenizer's vocabulary shows as <|id N|>.
  const bool bytes = is_bytes(tokenizer);
  const std::string header = bytes ? fmt::format("# sample (temperature {:.2f}):", temperature)
                                   : fmt::format("# sample (temperature {:.2f}, {} tokens):", temperature, tokens);
  std::printf("%s\n%s\n", header.c_str(),
              escape_unprintable(decode_for_display(tokenizer, ids), /*keep_utf8=*/!bytes).c_str());
}

std::string escape_unprintable(std::string_view bytes, bool keep_utf8) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const char ch = bytes[i];
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) {
      out.push_back(ch);
    } else if (const std::size_t n = keep_utf8 ? printable_utf8(bytes, i) : 0; n > 0) {
      out.append(bytes.substr(i, n));
      i += n - 1;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

int train_language_model(const char* program, train::TrainFlags& flags, const TokenDataFlags& data,
                         const SampleFlags& sample, const models::ModelFlags& model) {
  flags.model_spec = [&] { return models::spec(model.resolve(), data.seq_len); };  // for --auto and --dry-run
  return train::run_job(program, flags, [&](train::Job& job) {
    const models::ModelConfig config = model.resolve();
    models::validate_parallel(config, flags.engine.layout.tp, flags.engine.layout.pp);
    const auto make_model = [&](const nn::Placement& at) { return models::make_model(config, at); };
    const TokenData tokens = data.load(job, models::vocab_size(config), models::context(config));
    if (data.prepare_only) return;
    std::optional<models::HFWeights> pretrained;  // --init-from: the weights each rank reads its part of
    if (!model.init_from().empty()) {
      pretrained = models::HFWeights::open(model.init_from(), config);
      flags.engine.initial_values = [&](const nn::Parameter& p) { return pretrained->initial_value(p); };
      if (job.rank0()) std::printf("# weights from %s\n", model.init_from().c_str());
    }
    train::Engine engine(job, flags.engine, make_model, *tokens.source);
    flags.fit.run_fields["seq_len"] = data.seq_len;
    if (!is_bytes(*tokens.tokenizer)) flags.fit.run_fields["tokenizer"] = tokens.tokenizer->description();
    flags.fit.at_end = [&](train::Engine& e) {
      sample.print(e, job, *tokens.tokenizer, [&] { return make_model({}); });
    };
    train::fit(job, engine, flags.fit);
  });
}

}  // namespace ht::examples
