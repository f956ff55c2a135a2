// Text corpora tokenized in parallel (ht/data/text_corpus.h): the documents
// of files and JSON Lines, shard sets read back through TokenCorpus as each
// document's ids followed by the end of text, the same bytes for any thread
// count, workers that encode documents at once, uint32 shards for a
// vocabulary over 65536, tokenize_text's splits,
// and every refusal by name, a failed write leaving nothing behind.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "ht/data/text_corpus.h"
#include "ht/data/token_corpus.h"
#include "ht/data/token_shard.h"
#include "test_util.h"

namespace ht::data {
namespace {
namespace fs = std::filesystem;

void put_file(const fs::path& path, std::string_view bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A tokenizer of its own for the tests: each byte b is id b + offset, a
// space followed by a letter is one id (offset + 256 + letter), and the end
// of text is the last id. `vocab` sets the vocabulary (and so the width).
class TestTokenizer final : public Tokenizer {
 public:
  explicit TestTokenizer(std::int64_t vocab = 300, bool eot = true) : vocab_(vocab), eot_(eot) {}
  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids;
    const std::int32_t base = std::int32_t(vocab_ - 300);
    for (std::size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c == ' ' && i + 1 < text.size() && text[i + 1] >= 'a' && text[i + 1] <= 'z') {
        ids.push_back(base + 256 + (text[++i] - 'a'));
      } else {
        ids.push_back(base + c);
      }
    }
    return ids;
  }
  std::string decode(std::span<const std::int32_t>) const override { return {}; }
  std::int64_t vocab_size() const override { return vocab_; }
  std::optional<std::int32_t> end_of_text() const override {
    return eot_ ? std::optional<std::int32_t>(std::int32_t(vocab_ - 1)) : std::nullopt;
  }
  std::string description() const override { return fmt::format("test tokenizer of {} ids", vocab_); }

 private:
  std::int64_t vocab_;
  bool eot_;
};

std::vector<std::int32_t> read_corpus(const std::string& spec) {
  const TokenCorpus c = TokenCorpus::open(spec);
  std::vector<std::int32_t> v(std::size_t(c.size()));
  c.read(0, c.size(), v.data());
  return v;
}

std::vector<std::int32_t> with_eot(const Tokenizer& tok, const std::vector<std::string>& docs) {
  std::vector<std::int32_t> v;
  for (const std::string& d : docs) {
    const auto ids = tok.encode(d);
    v.insert(v.end(), ids.begin(), ids.end());
    if (tok.end_of_text()) v.push_back(*tok.end_of_text());
  }
  return v;
}

// Every file under `dir` (relative name -> bytes).
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = file_bytes(e.path());
  return files;
}

std::string doc_text(int i) {
  std::string s = fmt::format("document {} says", i);
  for (int k = 0; k < i % 7; ++k) s += fmt::format(" word{} and more", k);
  return s + (i % 3 == 0 ? "\n\xC3\xA9t\xC3\xA9\n" : "\n");
}

TEST(TextCorpus, FilesAreListedRecursivelySkippingLinksHiddenAndDat) {
  const test::TempDir dir("ht_text_list");
  put_file(dir.path() / "b.txt", "b");
  put_file(dir.path() / "a" / "z.txt", "az");
  put_file(dir.path() / "a" / "index.dat", "binary");
  put_file(dir.path() / ".hidden" / "x.txt", "x");
  put_file(dir.path() / ".note", "n");
  fs::create_symlink(dir.path() / "b.txt", dir.path() / "b.u8");
  put_file(dir.path() / "single.txt", "s");
  EXPECT_EQ(list_text_files({dir / "single.txt", dir.path().string()}),
            (std::vector<std::string>{dir / "single.txt", dir / "a/z.txt", dir / "b.txt", dir / "single.txt"}));
  EXPECT_TRUE(test::throws_error([&] { list_text_files({dir / "missing.txt"}); }, ErrorKind::kIo,
                                 {"missing.txt", "does not exist"}));
  fs::create_directories(dir.path() / "empty");
  EXPECT_TRUE(test::throws_error([&] { list_text_files({dir / "empty"}); }, ErrorKind::kIo,
                                 {"empty", "holds no text files"}));
}

TEST(TextShards, RoundTripEachDocumentFollowedByEndOfText) {
  const test::TempDir dir("ht_text_round");
  std::vector<std::string> docs;
  for (int i = 0; i < 9; ++i) {
    docs.push_back(doc_text(i));
    put_file(dir.path() / "in" / fmt::format("doc{:02d}.txt", i), docs.back());
  }
  put_file(dir.path() / "in" / "empty.txt", "");  // a document of no text: its end of text alone
  docs.push_back("");
  const TestTokenizer tok;
  ShardSetOptions o;
  o.shard_tokens = 37;  // documents run on across shards
  o.val_documents = 3;
  o.threads = 3;
  std::vector<std::string> written;
  o.on_shard = [&](const std::string& name, std::int64_t) { written.push_back(name); };
  const ShardSetSummary s = write_shard_set({dir / "in"}, tok, dir / "out", o);
  // Files in name order: doc00..doc08, empty.txt; the last three are validation.
  std::sort(docs.begin(), docs.end() - 1);
  const std::vector<std::string> train(docs.begin(), docs.end() - 3), val(docs.end() - 3, docs.end());
  EXPECT_EQ(read_corpus(dir / "out/train_*.bin"), with_eot(tok, train));
  EXPECT_EQ(read_corpus(dir / "out/val_*.bin"), with_eot(tok, val));
  EXPECT_EQ(s.documents, 10);
  EXPECT_EQ(s.val_documents, 3);
  EXPECT_EQ(s.tokens, std::int64_t(with_eot(tok, docs).size()));
  EXPECT_EQ(s.val_tokens, std::int64_t(with_eot(tok, val).size()));
  EXPECT_EQ(s.shards, std::int64_t(written.size()));
  EXPECT_EQ(written.front(), "train_000000.bin");
  // llm.c's header, full shards of exactly shard_tokens.
  const TokenShard first = TokenShard::open(dir / "out/train_000000.bin");
  EXPECT_EQ(first.header().format, TokenShardFormat::kLlmc);
  EXPECT_EQ(first.header().token_bytes, 2);
  EXPECT_EQ(first.size(), 37);
  const std::string index = file_bytes(dir.path() / "out" / "index.json");
  for (const char* want : {"\"format\": \"llmc\"", "\"end_of_text\": 299", "\"documents\": 10",
                           "\"tokenizer\": \"test tokenizer of 300 ids\"", "\"file\": \"val_000000.bin\""})
    EXPECT_NE(index.find(want), std::string::npos) << want << " not in\n" << index;
  EXPECT_FALSE(fs::exists(dir.path() / ".out.partial"));

  // The fraction: round(0.25 x 10) = 3 documents again; hypertrain's format checks out.
  o.val_documents = 0;
  o.val_fraction = 0.25;
  o.format = TokenShardFormat::kHypertrain;
  write_shard_set({dir / "in"}, tok, dir / "ht", o);
  EXPECT_EQ(read_corpus(dir / "ht/val_*.bin"), with_eot(tok, val));
  const TokenShard h = TokenShard::open(dir / "ht/train_000000.bin");
  EXPECT_EQ(h.header().format, TokenShardFormat::kHypertrain);
  EXPECT_EQ(h.header().vocab_size, 300);
  h.verify();
}

TEST(TextShards, SameBytesForAnyThreadCount) {
  const test::TempDir dir("ht_text_threads");
  std::string jsonl;
  for (int i = 0; i < 400; ++i) {
    std::string text = doc_text(i);
    std::string escaped;
    for (char c : text) escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
    jsonl += fmt::format("{{\"id\": {}, \"text\": \"{}\"}}\n", i, escaped);
    if (i % 50 == 0) jsonl += "  \n";  // blank lines are no documents
  }
  put_file(dir.path() / "a.jsonl", jsonl);
  put_file(dir.path() / "b.jsonl", jsonl.substr(0, jsonl.rfind('\n', jsonl.size() / 3)));  // no last newline
  const TestTokenizer tok;
  std::map<std::string, std::string> first;
  for (const int threads : {1, 2, 7}) {
    ShardSetOptions o;
    o.threads = threads;
    o.shard_tokens = 1000;
    o.val_fraction = 0.1;
    o.text.jsonl = true;
    o.text.piece_bytes = 300;  // many pieces, finished out of order
    const std::string out = dir / fmt::format("out{}", threads);
    const ShardSetSummary s = write_shard_set({dir / "a.jsonl", dir / "b.jsonl"}, tok, out, o);
    EXPECT_EQ(s.threads, threads);
    const auto files = tree(out);
    if (first.empty()) {
      first = files;
      EXPECT_GT(files.size(), 5u);
    } else {
      EXPECT_EQ(files, first) << threads << " threads wrote other bytes than 1";
    }
  }
  // The JSON Lines' texts, in order.
  std::vector<std::string> docs;
  for (int i = 0; i < 400; ++i) docs.push_back(doc_text(i));
  const TextCorpus corpus = TextCorpus::open({dir / "a.jsonl"}, {.jsonl = true, .piece_bytes = 300});
  EXPECT_EQ(corpus.documents(), 400);
  EXPECT_GT(corpus.pieces().size(), 50u);
  std::vector<std::int32_t> got;
  std::int64_t next_document = 0;
  encode_corpus(corpus, tok, {.threads = 4, .end_of_text = 299, .pieces_ahead = 1}, [&](EncodedPiece&& p) {
    EXPECT_EQ(p.first_document, next_document);
    next_document += std::int64_t(p.ends.size());
    got.insert(got.end(), p.tokens.begin(), p.tokens.end());
  });
  EXPECT_EQ(got, with_eot(tok, docs));
}

// A tokenizer that waits 25 ms a document: the pool must overlap documents
// whatever else the machine runs (waiting needs no core).
class WaitingTokenizer final : public Tokenizer {
 public:
  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    return TestTokenizer().encode(text);
  }
  std::string decode(std::span<const std::int32_t>) const override { return {}; }
  std::int64_t vocab_size() const override { return 300; }
  std::optional<std::int32_t> end_of_text() const override { return 299; }
  std::string description() const override { return "waiting"; }
};

TEST(TextShards, WorkersEncodeDocumentsAtOnce) {
  const test::TempDir dir("ht_text_overlap");
  std::vector<std::string> docs;
  for (int i = 0; i < 12; ++i) {
    docs.push_back(doc_text(i));
    put_file(dir.path() / fmt::format("{:02d}.txt", i), docs.back());
  }
  const TextCorpus corpus = TextCorpus::open({dir.path().string()});
  const WaitingTokenizer tok;
  double seconds[2] = {0, 0};
  for (const int threads : {1, 4}) {
    std::vector<std::int32_t> got;
    const auto t0 = std::chrono::steady_clock::now();
    encode_corpus(corpus, tok, {.threads = threads, .end_of_text = 299},
                  [&](EncodedPiece&& p) { got.insert(got.end(), p.tokens.begin(), p.tokens.end()); });
    seconds[threads == 4] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(got, with_eot(TestTokenizer(), docs));
  }
  // 12 x 25 ms = 300 ms on one thread; 4 threads: about 75 ms.
  EXPECT_GE(seconds[0], 0.29);
  EXPECT_LT(seconds[1], 0.5 * seconds[0]) << "1 thread: " << seconds[0] << " s, 4 threads: " << seconds[1] << " s";
}

TEST(TextShards, WideVocabulariesWriteUint32) {
  const test::TempDir dir("ht_text_wide");
  put_file(dir.path() / "a.txt", "hello world");
  put_file(dir.path() / "b.txt", "more text");
  const TestTokenizer tok(100000);
  const ShardSetSummary s = write_shard_set({dir / "a.txt", dir / "b.txt"}, tok, dir / "out", {});
  EXPECT_EQ(s.token_bytes, 4);
  const TokenShard shard = TokenShard::open(dir / "out/train_000000.bin");
  EXPECT_EQ(shard.header().token_bytes, 4);
  EXPECT_EQ(read_corpus(dir / "out/train_*.bin"), with_eot(tok, {"hello world", "more text"}));
}

TEST(TextShards, TokenizeTextSplitsTheLastFraction) {
  const test::TempDir dir("ht_text_splits");
  std::vector<std::string> docs;
  for (int i = 0; i < 4; ++i) {
    docs.push_back(doc_text(i + 3));
    put_file(dir.path() / fmt::format("{}.txt", i), docs.back());
  }
  const TestTokenizer tok;
  const TokenSplits s = tokenize_text(tok, {dir.path().string()}, 0.25, 2);
  std::vector<std::int32_t> all = s.train;
  all.insert(all.end(), s.val.begin(), s.val.end());
  EXPECT_EQ(all, with_eot(tok, docs));
  EXPECT_EQ(std::int64_t(s.val.size()), std::int64_t(double(all.size()) * 0.25));
  EXPECT_EQ(s.vocab_size, 300);
}

TEST(TextShards, RefusalsNameTheProblemAndLeaveNothing) {
  const test::TempDir dir("ht_text_errors");
  put_file(dir.path() / "a.txt", "alpha");
  put_file(dir.path() / "b.txt", "beta");
  const std::vector<std::string> in{dir / "a.txt", dir / "b.txt"};
  const TestTokenizer tok;
  EXPECT_TRUE(test::throws_error([&] { write_shard_set({dir / "nope.txt"}, tok, dir / "o1", {}); }, ErrorKind::kIo,
                      {"nope.txt", "does not exist"}));
  EXPECT_TRUE(test::throws_error([&] { write_shard_set(in, TestTokenizer(300, false), dir / "o1", {}); }, ErrorKind::kConfig,
                      {"no end-of-text", "--eot", "--no-eot"}));
  EXPECT_TRUE(test::throws_error(
      [&] { write_shard_set(in, tok, dir / "o1", {.end_of_text = 300}); }, ErrorKind::kConfig, {"--eot 300", "300"}));
  EXPECT_TRUE(test::throws_error([&] { write_shard_set(in, tok, dir / "o1", {.val_documents = 2}); }, ErrorKind::kConfig,
                      {"2 documents", "none of the 2"}));
  EXPECT_TRUE(test::throws_error([&] { write_shard_set(in, tok, dir / "o1", {.shard_tokens = std::int64_t(1) << 31}); },
                      ErrorKind::kConfig, {"int32"}));
  EXPECT_FALSE(fs::exists(dir.path() / "o1"));
  EXPECT_FALSE(fs::exists(dir.path() / ".o1.partial"));  // removed after a failure
  // Out: a file; a directory of other files (kept); an existing set without --overwrite.
  EXPECT_TRUE(test::throws_error([&] { write_shard_set(in, tok, dir / "a.txt", {}); }, ErrorKind::kIo, {"not a directory"}));
  put_file(dir.path() / "mine" / "keep.txt", "keep");
  EXPECT_TRUE(test::throws_error([&] { write_shard_set(in, tok, dir / "mine", {}); }, ErrorKind::kIo,
                      {"mine", "no shard set", "nothing was deleted"}));
  EXPECT_EQ(file_bytes(dir.path() / "mine" / "keep.txt"), "keep");
  write_shard_set(in, tok, dir / "set", {.no_end_of_text = true});
  EXPECT_EQ(read_corpus(dir / "set/train_*.bin"), tok.encode("alphabeta"));
  EXPECT_TRUE(test::throws_error([&] { write_shard_set(in, tok, dir / "set", {}); }, ErrorKind::kIo, {"--overwrite"}));
  write_shard_set({dir / "b.txt"}, tok, dir / "set", {.overwrite = true});
  EXPECT_EQ(read_corpus(dir / "set/train_*.bin"), with_eot(tok, {"beta"}));
  EXPECT_FALSE(fs::exists(dir.path() / ".set.old"));
  // An empty directory is taken; a directory that cannot be created is named.
  fs::create_directories(dir.path() / "empty");
  write_shard_set(in, tok, (dir.path() / "empty/").string(), {});
  EXPECT_TRUE(fs::exists(dir.path() / "empty" / "index.json"));
  EXPECT_TRUE(test::throws_error([&] { write_shard_set(in, tok, "/proc/ht_no_such/shards", {}); }, ErrorKind::kIo,
                      {"/proc/ht_no_such"}));
  // JSON Lines: the first bad line in order is named, whatever the threads.
  std::string jsonl;
  for (int i = 0; i < 200; ++i)
    jsonl += i == 120 ? "{\"text\": 5}\n" : i == 150 ? "not json\n" : fmt::format("{{\"text\": \"line {}\"}}\n", i);
  put_file(dir.path() / "bad.jsonl", jsonl);
  ShardSetOptions o;
  o.text.jsonl = true;
  o.text.piece_bytes = 64;
  o.threads = 4;
  EXPECT_TRUE(test::throws_error([&] { write_shard_set({dir / "bad.jsonl"}, tok, dir / "o2", o); }, ErrorKind::kIo,
                      {"bad.jsonl:121", "\"text\" is a number, not a string"}));
  o.text.jsonl_field = "body";
  put_file(dir.path() / "bad.jsonl", "{\"text\": \"x\"}\n");
  EXPECT_TRUE(test::throws_error([&] { write_shard_set({dir / "bad.jsonl"}, tok, dir / "o2", o); }, ErrorKind::kIo,
                      {"bad.jsonl:1", "no field \"body\""}));
  EXPECT_FALSE(fs::exists(dir.path() / "o2"));
  EXPECT_FALSE(fs::exists(dir.path() / ".o2.partial"));
}

}  // namespace
}  // namespace ht::data
