// Token shards (hypertrain's, llm.c's, raw), corpora across shards, the
// blend of corpora, and ShardBatches as a DataSource: the same windows as
// TokenBatches for the same tokens, the same under any sharding, 70/30
// blends within 1 % over 100,000 samples, document ids, and every corrupt
// header refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ht/data/shard_batches.h"
#include "ht/data/token_batches.h"
#include "ht/data/token_blend.h"
#include "ht/data/token_corpus.h"
#include "ht/data/token_shard.h"
#include "test_util.h"

namespace ht::data {
namespace {
namespace fs = std::filesystem;

std::vector<std::int32_t> sequence(std::int64_t n, std::int32_t vocab, std::int32_t base = 0) {
  std::vector<std::int32_t> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(base + std::int32_t((i * 7919 + i / 13) % vocab));
  return v;
}

std::vector<std::int32_t> read_all(const TokenShard& s) {
  std::vector<std::int32_t> v(std::size_t(s.size()));
  s.read(0, s.size(), v.data());
  return v;
}

std::vector<std::int32_t> rows(const Tensor& t) { return t.to_vector<std::int32_t>(); }

// Writes `bytes` to `path` as they are.
void put_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
std::string llmc_header(std::int32_t magic, std::int32_t version, std::int32_t count) {
  std::string h(1024, '\0');
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 4);
  std::memcpy(h.data() + 8, &count, 4);
  return h;
}

TEST(TokenShard, HypertrainShardsRoundTripInBothWidths) {
  const test::TempDir dir("ht_token_shard_rt");
  const auto small = sequence(1000, 50257), big = sequence(777, 128256);
  write_token_shard(dir / "a.bin", small, {.vocab_size = 50257});
  write_token_shard(dir / "b.bin", big);
  EXPECT_FALSE(fs::exists(dir / "a.bin.tmp"));
  const TokenShard a = TokenShard::open(dir / "a.bin"), b = TokenShard::open(dir / "b.bin");
  EXPECT_EQ(a.header().format, TokenShardFormat::kHypertrain);
  EXPECT_EQ(a.header().token_bytes, 2);
  EXPECT_EQ(a.header().vocab_size, 50257);
  EXPECT_EQ(b.header().token_bytes, 4);
  EXPECT_EQ(fs::file_size(dir / "a.bin"), 1024u + 2 * 1000);
  EXPECT_EQ(read_all(a), small);
  EXPECT_EQ(read_all(b), big);
  a.verify();
  b.verify();
  std::vector<std::int32_t> part(5);
  a.read(995, 5, part.data());
  EXPECT_EQ(part, std::vector<std::int32_t>(small.end() - 5, small.end()));
  EXPECT_TRUE(test::throws_error([&] { a.read(996, 5, part.data()); }, ErrorKind::kOutOfRange, {"[996, 1001)"}));
}

TEST(TokenShard, LlmcAndRawShardsAreRead) {
  const test::TempDir dir("ht_token_shard_llmc");
  const auto gpt2 = sequence(300, 50257), llama = sequence(300, 128256);
  write_token_shard(dir / "g.bin", gpt2, {.format = TokenShardFormat::kLlmc});
  write_token_shard(dir / "l.bin", llama, {.format = TokenShardFormat::kLlmc});
  const std::string g = file_bytes(dir / "g.bin");
  EXPECT_EQ(g.substr(0, 12), llmc_header(20240520, 1, 300).substr(0, 12));
  EXPECT_EQ(file_bytes(dir / "l.bin").substr(0, 12), llmc_header(20240801, 7, 300).substr(0, 12));
  EXPECT_EQ(read_all(TokenShard::open(dir / "g.bin")), gpt2);
  EXPECT_EQ(read_all(TokenShard::open(dir / "l.bin")), llama);
  EXPECT_EQ(TokenShard::open(dir / "l.bin").header().format, TokenShardFormat::kLlmc);
  // nanoGPT's train.bin: the tokens of g.bin without its header.
  put_file(dir / "train.bin", g.substr(1024));
  EXPECT_EQ(read_all(TokenShard::open("raw-uint16:" + dir / "train.bin")), gpt2);
  put_file(dir / "train32.bin", file_bytes(dir / "l.bin").substr(1024));
  EXPECT_EQ(read_all(TokenShard::open("raw-uint32:" + dir / "train32.bin")), llama);
  // Without the prefix a headerless file is refused, not guessed at.
  EXPECT_TRUE(test::throws_error([&] { TokenShard::open(dir / "train.bin"); }, ErrorKind::kIo,
                                 {"train.bin", "shorter than the 1024-byte header", "raw-uint16:"}));
  EXPECT_TRUE(test::throws_error([&] { TokenShard::open(dir / "train32.bin"); }, ErrorKind::kIo,
                                 {"train32.bin", "bad magic", "raw-uint32:"}));
}

TEST(TokenShard, CorruptHeadersAreRefusedByName) {
  const test::TempDir dir("ht_token_shard_bad");
  const std::string p = dir / "bad.bin";
  const auto refused = [&](std::initializer_list<std::string_view> needles, const std::string& spec = "") {
    return test::throws_error([&] { TokenShard::open(spec.empty() ? p : spec); }, ErrorKind::kIo, needles);
  };
  const std::string tokens(200, '\1');  // 100 uint16
  put_file(p, llmc_header(12345, 1, 100) + tokens);
  EXPECT_TRUE(refused({"bad.bin", "bad magic 12345"}));
  put_file(p, llmc_header(20240520, 3, 100) + tokens);
  EXPECT_TRUE(refused({"bad.bin", "unknown version 3"}));
  put_file(p, llmc_header(20240801, 1, 50) + tokens);
  EXPECT_TRUE(refused({"Llama 3", "unknown version 1"}));
  put_file(p, llmc_header(20240520, 1, 101) + tokens);
  EXPECT_TRUE(refused({"bad.bin", "counts 101 tokens", "runs past the file's end"}));
  put_file(p, llmc_header(20240520, 1, 99) + tokens);
  EXPECT_TRUE(refused({"counts 99 tokens", "no token owns"}));
  put_file(p, llmc_header(20240520, 1, -4) + tokens);
  EXPECT_TRUE(refused({"counts -4 tokens"}));
  put_file(p, llmc_header(20240520, 1, 100).substr(0, 600));
  EXPECT_TRUE(refused({"600 bytes, shorter than the 1024-byte header"}));
  put_file(p, tokens + "x");
  EXPECT_TRUE(refused({"not a whole number of tokens"}, "raw-uint16:" + p));
  // Hypertrain shards: a damaged header, a damaged token, a truncated file.
  write_token_shard(p, sequence(100, 1000));
  std::string good = file_bytes(p);
  std::string damaged = good;
  damaged[17] ^= 1;  // the token count
  put_file(p, damaged);
  EXPECT_TRUE(refused({"bad.bin", "header's checksum does not match"}));
  damaged = good;
  damaged[1024 + 10] ^= 1;
  put_file(p, damaged);
  const TokenShard s = TokenShard::open(p);  // the header is fine; the tokens are checked on demand
  EXPECT_TRUE(test::throws_error([&] { s.verify(); }, ErrorKind::kIo, {"bad.bin", "tokens are damaged"}));
  put_file(p, good.substr(0, good.size() - 2));
  EXPECT_TRUE(refused({"counts 100 tokens", "runs past the file's end"}));
  EXPECT_TRUE(refused({"cannot open", "missing.bin"}, dir / "missing.bin"));
}

TEST(TokenShard, WriterRefusesIdsThatDoNotFit) {
  const test::TempDir dir("ht_token_shard_ids");
  const std::vector<std::int32_t> bad = {1, -2};
  EXPECT_TRUE(test::throws_error([&] { write_token_shard(dir / "a", bad); }, ErrorKind::kInvalidArgument,
                                 {"token 1 is -2"}));
  const std::vector<std::int32_t> wide = {70000};
  EXPECT_TRUE(test::throws_error([&] { write_token_shard(dir / "a", wide, {.token_bytes = 2}); },
                                 ErrorKind::kInvalidArgument, {"70000 does not fit in uint16"}));
  EXPECT_TRUE(test::throws_error([&] { write_token_shard(dir / "a", wide, {.vocab_size = 50000}); },
                                 ErrorKind::kInvalidArgument, {"outside the vocabulary of 50000"}));
  EXPECT_FALSE(fs::exists(dir / "a"));
}

TEST(TokenCorpus, ReadsAcrossShardsAndExpandsGlobs) {
  const test::TempDir dir("ht_token_corpus");
  const auto all = sequence(1000, 5000);
  write_token_shard(dir / "s_01.bin", std::span(all).subspan(0, 400));
  write_token_shard(dir / "s_00.bin", std::span(all).subspan(0, 0));  // an empty shard first
  write_token_shard(dir / "s_02.bin", std::span(all).subspan(400, 350), {.format = TokenShardFormat::kLlmc});
  write_token_shard(dir / "s_03.bin", std::span(all).subspan(750));
  EXPECT_EQ(expand_shard_spec(dir / "s_*.bin"),
            (std::vector<std::string>{dir / "s_00.bin", dir / "s_01.bin", dir / "s_02.bin", dir / "s_03.bin"}));
  EXPECT_EQ(expand_shard_spec("raw-uint16:" + dir / "s_0[12].bin"),
            (std::vector<std::string>{"raw-uint16:" + dir / "s_01.bin", "raw-uint16:" + dir / "s_02.bin"}));
  const TokenCorpus c = TokenCorpus::open(dir / "s_*.bin");
  EXPECT_EQ(c.size(), 1000);
  for (std::int64_t first : {0, 1, 399, 400, 390, 749, 750, 980})
    for (std::int64_t count : {0, 1, 10, 20}) {
      if (first + count > 1000) continue;
      std::vector<std::int32_t> got(static_cast<std::size_t>(count));
      c.read(first, count, got.data());
      EXPECT_EQ(got, std::vector<std::int32_t>(all.begin() + first, all.begin() + first + count)) << first;
    }
  std::vector<std::int32_t> whole(1000);
  c.read(0, 1000, whole.data());
  EXPECT_EQ(whole, all);
  EXPECT_TRUE(test::throws_error([&] { TokenCorpus::open(dir / "none_*.bin"); }, ErrorKind::kIo, {"matches no file"}));
  EXPECT_TRUE(test::throws_error([&] { expand_shard_spec(dir / "a.bin,,b"); }, ErrorKind::kInvalidArgument,
                                 {"an empty item"}));
}

TEST(ShardBatches, OneCorpusGivesTokenBatchesSamples) {
  const test::TempDir dir("ht_shard_batches_tb");
  TokenSplits splits{sequence(5000, 300), sequence(700, 300, 1), 301};
  write_token_shard(dir / "train.bin", splits.train);
  write_token_shard(dir / "val.bin", splits.val);
  ShardBatches shards(dir / "train.bin", dir / "val.bin", {.seq_len = 16});
  TokenBatches reference(splits, 16);
  for (DataSource* s : {static_cast<DataSource*>(&shards), static_cast<DataSource*>(&reference)})
    s->attach({.seed = 1234});
  for (const auto& [first, count] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 8}, {5, 3}, {1000003, 4}}) {
    const MicroBatch a = shards.samples(first, count), b = reference.samples(first, count);
    EXPECT_EQ(rows(a.input), rows(b.input));
    EXPECT_EQ(rows(a.target), rows(b.target));
    const MicroBatch va = shards.validation_samples(first, count), vb = reference.validation_samples(first, count);
    EXPECT_EQ(rows(va.input), rows(vb.input));
    EXPECT_EQ(rows(va.target), rows(vb.target));
  }
  EXPECT_TRUE(shards.has_validation());
  ShardBatches no_val(dir / "train.bin", "", {.seq_len = 16});
  EXPECT_FALSE(no_val.has_validation());
  EXPECT_TRUE(test::throws_error([&] { no_val.validation_samples(0, 1); }, ErrorKind::kNotSupported,
                                 {"no validation shards"}));
}

TEST(ShardBatches, SamplesAreTheSameUnderAnySharding) {
  const test::TempDir dir("ht_shard_batches_cut");
  const auto all = sequence(4096, 1000);
  // Cut one: three hypertrain shards; cut two: two llm.c shards and a raw one.
  write_token_shard(dir / "a0.bin", std::span(all).subspan(0, 1000));
  write_token_shard(dir / "a1.bin", std::span(all).subspan(1000, 1));
  write_token_shard(dir / "a2.bin", std::span(all).subspan(1001));
  write_token_shard(dir / "b0.bin", std::span(all).subspan(0, 2500), {.format = TokenShardFormat::kLlmc});
  write_token_shard(dir / "b1.bin", std::span(all).subspan(2500, 1000), {.format = TokenShardFormat::kLlmc});
  put_file(dir / "b2.raw", file_bytes(dir / "a2.bin").substr(1024 + 2 * (3500 - 1001)));
  ShardBatches one(dir / "a*.bin", dir / "a*.bin", {.seq_len = 64});
  ShardBatches two(dir / "b0.bin," + dir / "b1.bin,raw-uint16:" + dir / "b2.raw", dir / "b*.bin", {.seq_len = 64});
  EXPECT_EQ(two.corpus(0).size(), 4096);
  one.attach({.seed = 7});
  two.attach({.seed = 7});
  // Micro-batches of any size and offset: a range read at once equals its rows read one by one.
  const MicroBatch whole = one.samples(100, 64);
  EXPECT_EQ(rows(whole.input), rows(two.samples(100, 64).input));
  std::vector<std::int32_t> pieced;
  for (std::int64_t i = 100; i < 164; i += 16) {
    const auto r = rows(two.samples(i, 16).input);
    pieced.insert(pieced.end(), r.begin(), r.end());
  }
  EXPECT_EQ(pieced, rows(whole.input));
  EXPECT_EQ(rows(one.samples(0, 200).target), rows(two.samples(0, 200).target));
  // Validation: the first 30 windows of each cut's own corpus (a*: 4096 tokens, b0+b1: 3500).
  EXPECT_EQ(rows(one.validation_samples(0, 30).input).size(), 30u * 64);
}

TEST(ShardBatches, BlendMeetsItsWeightsAndIsDeterministic) {
  const test::TempDir dir("ht_shard_batches_blend");
  // Part A's ids are below 500, part B's 500 and above: a row tells its part.
  write_token_shard(dir / "a.bin", sequence(3000, 500));
  write_token_shard(dir / "b.bin", sequence(2000, 500, 500));
  ShardBatches blend("0.7:" + dir / "a.bin,0.3:" + dir / "b.bin", "", {.seq_len = 8});
  blend.attach({.seed = 99});
  EXPECT_EQ(blend.parts(), 2);
  constexpr std::int64_t kSamples = 100000;
  std::int64_t from_a = 0;
  for (std::int64_t first = 0; first < kSamples; first += 1000) {
    const auto in = rows(blend.samples(first, 1000).input);
    for (std::int64_t r = 0; r < 1000; ++r) {
      const bool a = in[std::size_t(r * 8)] < 500;
      from_a += a;
      EXPECT_EQ(blend.part_of(first + r), a ? 0 : 1);
    }
  }
  const double share = double(from_a) / kSamples;
  EXPECT_NEAR(share, 0.7, 0.007) << "70/30 blend within 1 %";
  EXPECT_NEAR(share, 0.7, 0.0005) << "the Weyl sequence is much closer than 1 %";
  // Within every 100 consecutive samples too, nearly the mixture.
  for (std::int64_t first = 0; first < 5000; first += 100) {
    int a = 0;
    for (std::int64_t i = first; i < first + 100; ++i) a += blend.part_of(i) == 0;
    EXPECT_NEAR(a, 70, 3) << first;
  }
  // Deterministic given the seed, different for another.
  ShardBatches again("0.7:" + dir / "a.bin,0.3:" + dir / "b.bin", "", {.seq_len = 8});
  again.attach({.seed = 99});
  EXPECT_EQ(rows(again.samples(123456, 50).input), rows(blend.samples(123456, 50).input));
  ShardBatches other("0.7:" + dir / "a.bin,0.3:" + dir / "b.bin", "", {.seq_len = 8});
  other.attach({.seed = 100});
  int differ = 0;
  for (std::int64_t i = 0; i < 200; ++i) differ += other.part_of(i) != blend.part_of(i);
  EXPECT_GT(differ, 0);
}

TEST(TokenBlend, SpecsParseAndBadOnesAreRefused) {
  EXPECT_EQ(parse_blend("a.bin"), (std::vector<BlendPart>{{1.0, "a.bin"}}));
  EXPECT_EQ(parse_blend("a/*.bin,b.bin"), (std::vector<BlendPart>{{1.0, "a/*.bin,b.bin"}}));
  EXPECT_EQ(parse_blend("0.7:a.bin,x.bin,0.3:raw-uint16:b.bin"),
            (std::vector<BlendPart>{{0.7, "a.bin,x.bin"}, {0.3, "raw-uint16:b.bin"}}));
  EXPECT_TRUE(test::throws_error([] { parse_blend("0:a,1:b"); }, ErrorKind::kConfig, {"weight 0 is not a positive"}));
  EXPECT_TRUE(test::throws_error([] { parse_blend("a,0.5:b"); }, ErrorKind::kConfig, {"parts before it have none"}));
  EXPECT_TRUE(test::throws_error([] { parse_blend("0.5:"); }, ErrorKind::kConfig, {"names no shards"}));
  // Three parts, 100,000 samples: each within 1 % of its weight.
  const TokenBlend b({5, 3, 2}, 42);
  std::int64_t count[3] = {};
  for (std::int64_t i = 0; i < 100000; ++i) ++count[b.part(i)];
  EXPECT_NEAR(count[0] / 1e5, 0.5, 0.005);
  EXPECT_NEAR(count[1] / 1e5, 0.3, 0.003);
  EXPECT_NEAR(count[2] / 1e5, 0.2, 0.002);
}

TEST(ShardBatches, DocumentIdsCountEndOfTextTokens) {
  const test::TempDir dir("ht_shard_batches_docs");
  // Documents of 5 tokens, each ending in the end-of-text id 9.
  std::vector<std::int32_t> t;
  for (int d = 0; d < 40; ++d)
    for (int k = 0; k < 5; ++k) t.push_back(k == 4 ? 9 : (d + k) % 9);
  write_token_shard(dir / "d.bin", t);
  ShardBatches docs(dir / "d.bin", dir / "d.bin", {.seq_len = 12, .eot_token = 9, .document_ids = true});
  docs.attach({.seed = 3});
  const MicroBatch v = docs.validation_samples(0, 2);  // windows at tokens 0 and 12
  ASSERT_TRUE(v.side.count(std::string(kDocumentIdsSide)));
  EXPECT_EQ(rows(v.side.at(std::string(kDocumentIdsSide))),
            (std::vector<std::int32_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2,  // tokens 0..11: eot at 4 and 9
                                       0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2}));  // tokens 12..23: eot at 14 and 19
  const MicroBatch s = docs.samples(10, 4);
  const auto in = rows(s.input), ids = rows(s.side.at(std::string(kDocumentIdsSide)));
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t k = 1; k < 12; ++k)
      EXPECT_EQ(ids[r * 12 + k], ids[r * 12 + k - 1] + (in[r * 12 + k - 1] == 9 ? 1 : 0));
  EXPECT_TRUE(test::throws_error([&] { ShardBatches(dir / "d.bin", "", {.seq_len = 4, .document_ids = true}); },
                                 ErrorKind::kConfig, {"end-of-text"}));
}

TEST(ShardBatches, BadSetupsAreRefusedByName) {
  const test::TempDir dir("ht_shard_batches_bad");
  write_token_shard(dir / "s.bin", sequence(20, 100));
  EXPECT_TRUE(test::throws_error([&] { ShardBatches(dir / "s.bin", "", {.seq_len = 20}); },
                                 ErrorKind::kInvalidArgument, {"too short for one window of 20 + 1"}));
  EXPECT_TRUE(test::throws_error([&] { ShardBatches(dir / "s.bin", "", {.seq_len = 0}); }, ErrorKind::kConfig,
                                 {"--seq-len"}));
  ShardBatches small_vocab(dir / "s.bin", "", {.seq_len = 4, .vocab_size = 10});
  small_vocab.attach({});
  EXPECT_TRUE(test::throws_error([&] { small_vocab.samples(0, 16); }, ErrorKind::kInvalidArgument,
                                 {"outside the model's vocabulary of 10"}));
}

}  // namespace
}  // namespace ht::data
