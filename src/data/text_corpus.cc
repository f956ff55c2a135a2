// Text corpora: documents listed and cut into pieces, encoded by one pool of
// threads in piece order, and written as token arrays or sets of shards.
#include "ht/data/text_corpus.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/files.h"
#include "core/staged_directory.h"
#include "ht/core/error.h"

namespace ht::data {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void io_error(std::string message) { throw IoError(ErrorKind::kIo, std::move(message)); }

// An open file descriptor, closed on scope exit.
class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) io_error(fmt::format("cannot read text file '{}': {}", path, std::strerror(errno)));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Bytes [offset, offset + bytes) of `path`, or from `offset` to the end when bytes < 0.
std::string read_range(const std::string& path, std::int64_t offset, std::int64_t bytes) {
  const Fd fd(path);
  if (bytes < 0) {
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) io_error(fmt::format("cannot read text file '{}': {}", path, std::strerror(errno)));
    bytes = std::max<std::int64_t>(std::int64_t(st.st_size) - offset, 0);
  }
  std::string text(std::size_t(bytes), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pread(fd.get(), text.data() + done, text.size() - done, off_t(offset + std::int64_t(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_error(fmt::format("cannot read text file '{}': {}", path, std::strerror(errno)));
    if (n == 0) break;  // shorter than it was: the file changed under us
    done += std::size_t(n);
  }
  if (done < text.size())
    io_error(fmt::format("text file '{}' ended at byte {}, before byte {} that it held when it was listed (was it "
                         "changed while being read?)",
                         path, offset + std::int64_t(done), offset + bytes));
  return text;
}

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Cuts a JSON Lines file into pieces of whole lines of about `piece_bytes`,
// counting the lines that are not blank. The cut depends on the file alone.
void cut_jsonl(const std::string& path, std::int64_t piece_bytes, std::vector<TextPiece>& out,
               std::int64_t& documents) {
  const Fd fd(path);
  std::vector<char> buffer(std::size_t(1) << 20);
  TextPiece piece{.path = path, .offset = 0, .bytes = 0, .first_line = 1, .documents = 0};
  std::int64_t at = 0, line = 1;
  bool line_blank = true;
  const auto emit = [&](std::int64_t end) {
    piece.bytes = end - piece.offset;
    if (piece.documents > 0) {
      documents += piece.documents;
      out.push_back(piece);
    }
    piece = TextPiece{.path = path, .offset = end, .bytes = 0, .first_line = line, .documents = 0};
  };
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_error(fmt::format("cannot read text file '{}': {}", path, std::strerror(errno)));
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      const char c = buffer[std::size_t(i)];
      if (c == '\n') {
        if (!line_blank) ++piece.documents;
        ++line;
        line_blank = true;
        if (const std::int64_t end = at + i + 1; end - piece.offset >= piece_bytes) emit(end);
      } else if (c != ' ' && c != '\t' && c != '\r') {
        line_blank = false;
      }
    }
    at += n;
  }
  if (!line_blank) ++piece.documents;  // a last line without its newline
  emit(at);
}

}  // namespace

std::vector<std::string> list_text_files(const std::vector<std::string>& inputs) {
  HT_CHECK_ARG(!inputs.empty(), "no text inputs given: name text files or directories of them");
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);
    if (!fs::exists(st)) io_error(fmt::format("text input '{}' does not exist", input));
    if (fs::is_regular_file(st)) {
      files.push_back(input);
      continue;
    }
    if (!fs::is_directory(st))
      io_error(fmt::format("text input '{}' is neither a file nor a directory", input));
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(input, fs::directory_options::none, ec), end;
    if (ec) io_error(fmt::format("cannot list text directory '{}': {}", input, ec.message()));
    for (; it != end; it.increment(ec)) {
      if (ec) io_error(fmt::format("cannot list text directory '{}': {}", input, ec.message()));
      const std::string name = it->path().filename().string();
      if (name.starts_with(".") || it->is_symlink()) {
        if (it->is_directory() && !it->is_symlink()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && it->path().extension() != ".dat") found.push_back(it->path().string());
    }
    if (ec) io_error(fmt::format("cannot list text directory '{}': {}", input, ec.message()));
    if (found.empty())
      io_error(fmt::format("text directory '{}' holds no text files (links, hidden names and *.dat are skipped)",
                           input));
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

TextCorpus TextCorpus::open(const std::vector<std::string>& inputs, const TextCorpusOptions& options) {
  HT_CHECK(options.piece_bytes > 0, ErrorKind::kConfig, "piece_bytes {} must be positive", options.piece_bytes);
  HT_CHECK(!options.jsonl || !options.jsonl_field.empty(), ErrorKind::kConfig, "name the JSON Lines field to read");
  TextCorpus c;
  c.options_ = options;
  for (const std::string& file : list_text_files(inputs)) {
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec) io_error(fmt::format("cannot read text file '{}': {}", file, ec.message()));
    c.bytes_ += std::int64_t(size);
    ++c.files_;
    if (options.jsonl) {
      cut_jsonl(file, options.piece_bytes, c.pieces_, c.documents_);
    } else {
      c.pieces_.push_back({.path = file, .offset = 0, .bytes = std::int64_t(size), .first_line = 1, .documents = 1});
      ++c.documents_;
    }
  }
  return c;
}

std::vector<std::string> TextCorpus::read(std::size_t i) const {
  const TextPiece& p = pieces_.at(i);
  if (!options_.jsonl) return {read_range(p.path, 0, -1)};  // the file as it is now
  const std::string text = read_range(p.path, p.offset, p.bytes);
  std::vector<std::string> docs;
  docs.reserve(std::size_t(p.documents));
  std::int64_t line = p.first_line;
  for (std::size_t start = 0; start < text.size(); ++line) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view row(text.data() + start, end - start);
    start = end + 1;
    if (blank(row)) continue;
    const auto bad = [&](const std::string& what) {
      io_error(fmt::format("{}:{}: {} (each line of a JSON Lines file is an object with a string \"{}\")", p.path,
                           line, what, options_.jsonl_field));
    };
    const nlohmann::json j = nlohmann::json::parse(row, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) bad("not JSON");
    if (!j.is_object()) bad(fmt::format("a JSON {}, not an object", j.type_name()));
    const auto field = j.find(options_.jsonl_field);
    if (field == j.end()) bad(fmt::format("no field \"{}\"", options_.jsonl_field));
    if (!field->is_string()) bad(fmt::format("\"{}\" is a {}, not a string", options_.jsonl_field, field->type_name()));
    docs.push_back(field->get<std::string>());
  }
  if (std::int64_t(docs.size()) != p.documents)
    io_error(fmt::format("text file '{}' changed while being read: lines {}.. held {} documents, now {}", p.path,
                         p.first_line, p.documents, docs.size()));
  return docs;
}

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  return std::max(1, int(std::thread::hardware_concurrency()));
}

void encode_corpus(const TextCorpus& corpus, const Tokenizer& tokenizer, const EncodeOptions& options,
                   const std::function<void(EncodedPiece&&)>& sink) {
  HT_CHECK(options.threads >= 0, ErrorKind::kConfig, "threads {} must be positive (0: one per hardware thread)",
           options.threads);
  const int threads = resolve_threads(options.threads);
  const std::size_t n = corpus.pieces().size();
  const std::size_t ahead = std::size_t(options.pieces_ahead > 0 ? options.pieces_ahead : 4 * threads);

  // Pieces are claimed in order; each finished one (or its error) waits in
  // `done` until the calling thread takes it. A worker claims piece i only
  // while i < taken + ahead. After an error no piece is claimed: those
  // claimed before it finish, so the first error in piece order is the one
  // the calling thread meets.
  struct Result {
    EncodedPiece piece;
    std::exception_ptr error;
  };
  std::mutex mutex;
  std::condition_variable claimable, finished;
  std::map<std::size_t, Result> done;
  std::size_t next = 0, taken = 0;
  bool stop = false;

  std::vector<std::int64_t> first_document(n);
  for (std::size_t i = 0, d = 0; i < n; d += std::size_t(corpus.pieces()[i].documents), ++i)
    first_document[i] = std::int64_t(d);

  const auto work = [&] {
    for (;;) {
      std::size_t i;
      {
        std::unique_lock lock(mutex);
        claimable.wait(lock, [&] { return stop || next >= n || next < taken + ahead; });
        if (stop || next >= n) return;
        i = next++;
      }
      Result r;
      try {
        r.piece.piece = i;
        r.piece.first_document = first_document[i];
        for (const std::string& doc : corpus.read(i)) {
          const std::vector<std::int32_t> ids = tokenizer.encode(doc);
          r.piece.tokens.insert(r.piece.tokens.end(), ids.begin(), ids.end());
          if (options.end_of_text) r.piece.tokens.push_back(*options.end_of_text);
          r.piece.ends.push_back(std::int64_t(r.piece.tokens.size()));
        }
      } catch (...) {
        r.error = std::current_exception();
      }
      std::lock_guard lock(mutex);
      if (r.error) stop = true;
      done.emplace(i, std::move(r));
      finished.notify_all();
      if (stop) claimable.notify_all();
    }
  };

  std::vector<std::thread> pool;
  const auto shut_down = [&] {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    claimable.notify_all();
    for (std::thread& t : pool)
      if (t.joinable()) t.join();
  };
  try {
    const std::size_t workers = std::min(std::size_t(threads), std::max<std::size_t>(n, 1));
    for (std::size_t t = 0; t < workers; ++t) pool.emplace_back(work);
    for (std::size_t i = 0; i < n; ++i) {
      Result r;
      {
        std::unique_lock lock(mutex);
        finished.wait(lock, [&] { return done.count(i) > 0; });
        auto it = done.find(i);
        r = std::move(it->second);
        done.erase(it);
        ++taken;
      }
      claimable.notify_all();
      if (r.error) std::rethrow_exception(r.error);
      sink(std::move(r.piece));
    }
  } catch (...) {
    shut_down();
    throw;
  }
  shut_down();
}

TokenSplits tokenize_text(const Tokenizer& tokenizer, const std::vector<std::string>& inputs, double val_fraction,
                          int threads) {
  HT_CHECK_ARG(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction must lie in (0, 1), got {}", val_fraction);
  const TextCorpus corpus = TextCorpus::open(inputs);
  std::vector<std::int32_t> all;
  encode_corpus(corpus, tokenizer, {.threads = threads, .end_of_text = tokenizer.end_of_text()},
                [&](EncodedPiece&& p) { all.insert(all.end(), p.tokens.begin(), p.tokens.end()); });
  return split_tail(std::move(all), val_fraction, tokenizer.vocab_size(), "tokens of " + tokenizer.description());
}

namespace {

// One split's shards, filled in order, each written when full.
struct SplitWriter {
  std::string prefix;
  fs::path dir;
  const ShardSetOptions* options = nullptr;
  TokenShardWriteOptions write;
  std::vector<std::int32_t> buffer{};
  std::vector<std::pair<std::string, std::int64_t>> shards{};  // name, tokens
  std::int64_t tokens = 0, documents = 0;

  void add(const std::int32_t* ids, std::int64_t count) {
    tokens += count;
    while (count > 0) {
      const std::int64_t room = options->shard_tokens - std::int64_t(buffer.size());
      const std::int64_t take = std::min(room, count);
      buffer.insert(buffer.end(), ids, ids + take);
      ids += take;
      count -= take;
      if (std::int64_t(buffer.size()) == options->shard_tokens) flush();
    }
  }
  void flush() {
    if (buffer.empty()) return;
    const std::string name = fmt::format("{}_{:06d}.bin", prefix, shards.size());
    write_token_shard((dir / name).string(), buffer, write);
    shards.emplace_back(name, std::int64_t(buffer.size()));
    if (options->on_shard) options->on_shard(name, std::int64_t(buffer.size()));
    buffer.clear();
  }
  nlohmann::json index() const {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [name, count] : shards) list.push_back({{"file", name}, {"tokens", count}});
    return {{"documents", documents}, {"tokens", tokens}, {"shards", list}};
  }
};

}  // namespace

ShardSetSummary write_shard_set(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                                const std::string& out_dir, const ShardSetOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  HT_CHECK(options.format == TokenShardFormat::kLlmc || options.format == TokenShardFormat::kHypertrain,
           ErrorKind::kConfig, "shards are written in llm.c's format or hypertrain's");
  HT_CHECK(options.shard_tokens > 0, ErrorKind::kConfig, "--shard-tokens {} must be positive", options.shard_tokens);
  HT_CHECK(options.format != TokenShardFormat::kLlmc || options.shard_tokens <= std::numeric_limits<std::int32_t>::max(),
           ErrorKind::kConfig,
           "--shard-tokens {}: an llm.c shard counts its tokens in an int32 (at most 2147483647); write fewer per shard",
           options.shard_tokens);
  HT_CHECK(options.val_documents >= 0, ErrorKind::kConfig, "--val-docs {} is negative", options.val_documents);
  HT_CHECK(options.val_fraction >= 0 && options.val_fraction < 1, ErrorKind::kConfig,
           "--val-fraction {} must lie in [0, 1)", options.val_fraction);
  HT_CHECK(options.val_documents == 0 || options.val_fraction == 0, ErrorKind::kConfig,
           "give --val-docs or --val-fraction, not both");
  HT_CHECK(!(options.end_of_text && options.no_end_of_text), ErrorKind::kConfig, "give --eot ID or --no-eot, not both");
  const std::int64_t vocab = tokenizer.vocab_size();
  std::optional<std::int32_t> eot = options.end_of_text;
  if (!eot && !options.no_end_of_text) {
    eot = tokenizer.end_of_text();
    HT_CHECK(eot.has_value(), ErrorKind::kConfig,
             "the tokenizer {} has no end-of-text token to separate documents: name one with --eot ID (an id below "
             "its vocabulary of {}), or pass --no-eot to run documents together",
             tokenizer.description(), vocab);
  }
  HT_CHECK(!eot || (*eot >= 0 && *eot < vocab), ErrorKind::kConfig,
           "--eot {} is outside the tokenizer's vocabulary [0, {}) ({})", eot.value_or(0), vocab,
           tokenizer.description());

  // The out directory: a new one, an empty one, or (overwrite) a set of ours.
  fs::path out = fs::path(out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  HT_CHECK(!out.empty() && out.filename() != "." && out.filename() != "..", ErrorKind::kConfig,
           "--out '{}': name the directory by a path that ends in its own name", out_dir);
  const TextCorpus corpus = TextCorpus::open(inputs, options.text);
  HT_CHECK(corpus.documents() > 0, ErrorKind::kInvalidArgument, "the inputs ({} files) hold no documents{}",
           corpus.files(), options.text.jsonl ? " (every line is blank)" : "");
  std::error_code ec;
  const fs::file_status out_status = fs::status(out, ec);
  bool replace = false;
  if (fs::exists(out_status)) {
    if (!fs::is_directory(out_status)) io_error(fmt::format("--out '{}' exists and is not a directory", out_dir));
    if (!fs::is_empty(out, ec)) {
      if (!fs::exists(out / kShardSetIndex))
        io_error(fmt::format("--out '{}' holds files but no shard set ({} is missing): name a new or empty directory "
                             "(nothing was deleted)",
                             out_dir, kShardSetIndex));
      if (!options.overwrite)
        io_error(fmt::format("--out '{}' holds a shard set already: pass --overwrite to replace it, or name another "
                             "directory",
                             out_dir));
      replace = true;
    }
  }
  ShardSetSummary summary;
  summary.documents = corpus.documents();
  summary.val_documents = options.val_documents;
  if (options.val_fraction > 0)
    summary.val_documents = std::max<std::int64_t>(1, std::llround(options.val_fraction * double(corpus.documents())));
  HT_CHECK(summary.val_documents < corpus.documents(), ErrorKind::kConfig,
           "a validation split of {} documents leaves none of the {} for training: give more documents or a smaller "
           "--val-docs / --val-fraction",
           summary.val_documents, corpus.documents());
  summary.token_bytes = vocab <= 65536 ? 2 : 4;
  summary.threads = resolve_threads(options.threads);
  summary.text_bytes = corpus.bytes();
  ht::detail::StagedDirectory staging(out, "the shard set --out");
  {
    const TokenShardWriteOptions write{.format = options.format, .token_bytes = summary.token_bytes, .vocab_size = vocab};
    SplitWriter train{.prefix = "train", .dir = staging.path(), .options = &options, .write = write};
    SplitWriter val{.prefix = "val", .dir = staging.path(), .options = &options, .write = write};
    const std::int64_t first_val = corpus.documents() - summary.val_documents;
    encode_corpus(corpus, tokenizer, {.threads = options.threads, .end_of_text = eot}, [&](EncodedPiece&& p) {
      std::int64_t begin = 0;
      for (std::size_t k = 0; k < p.ends.size(); ++k) {
        SplitWriter& split = p.first_document + std::int64_t(k) < first_val ? train : val;
        split.add(p.tokens.data() + begin, p.ends[k] - begin);
        ++split.documents;
        begin = p.ends[k];
      }
    });
    train.flush();
    val.flush();
    summary.tokens = train.tokens + val.tokens;
    summary.val_tokens = val.tokens;
    summary.shards = std::int64_t(train.shards.size() + val.shards.size());
    summary.val_shards = std::int64_t(val.shards.size());

    const nlohmann::json index = {
        {"format", options.format == TokenShardFormat::kLlmc ? "llmc" : "hypertrain"},
        {"token_bytes", summary.token_bytes},
        {"tokenizer", tokenizer.description()},
        {"vocab_size", vocab},
        {"end_of_text", eot ? nlohmann::json(*eot) : nlohmann::json(nullptr)},
        {"documents", summary.documents},
        {"tokens", summary.tokens},
        {"input_files", corpus.files()},
        {"input_bytes", corpus.bytes()},
        {"jsonl", options.text.jsonl},
        {"shard_tokens", options.shard_tokens},
        {"train", train.index()},
        {"val", val.index()},
    };
    ht::detail::write_file((staging.path() / kShardSetIndex).string(), index.dump(2) + "\n", /*sync=*/true,
                           "shard set index");
    staging.commit(replace);
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace ht::data
