// Token files (HDF5 round trip, bad files), the batch sampler's contract
// (deterministic, resumable, rank slices that tile the global batch), the
// same contract for TokenBatches as a DataSource, and the unigram entropy.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "ht/data/batch_sampler.h"
#include "ht/data/token_batches.h"
#include "ht/data/token_dataset.h"
#include "test_util.h"

namespace ht::data {
namespace {
namespace fs = std::filesystem;

TEST(TokenFile, RoundTripsSplitsAndVocab) {
  const test::TempDir dir("ht_data_test_roundtrip");
  const fs::path& d = dir.path();
  TokenSplits s{{0, 5, 65535, 7, 7}, {1, 2}, 65536};
  write_token_file((d / "t.h5").string(), s);
  EXPECT_FALSE(fs::exists(d / "t.h5.tmp"));
  const TokenSplits r = read_token_file((d / "t.h5").string());
  EXPECT_EQ(r.train, s.train);
  EXPECT_EQ(r.val, s.val);
  EXPECT_EQ(r.vocab_size, 65536);
}

TEST(TokenFile, BadFilesGiveClearErrors) {
  const test::TempDir dir("ht_data_test_bad");
  const fs::path& d = dir.path();
  EXPECT_TRUE(test::throws_error([&] { read_token_file((d / "missing.h5").string()); }, ErrorKind::kIo,
                                 {"does not exist", "missing.h5"}));
  std::ofstream((d / "junk.h5").string()) << "not hdf5 at all";
  EXPECT_TRUE(test::throws_error([&] { read_token_file((d / "junk.h5").string()); }, ErrorKind::kIo, {"not an HDF5"}));
  write_token_file((d / "empty.h5").string(), TokenSplits{{}, {1}, 4});
  EXPECT_TRUE(test::throws_error([&] { read_token_file((d / "empty.h5").string()); }, ErrorKind::kInvalidArgument,
                                 {"empty split"}));
  EXPECT_TRUE(test::throws_error([&] { write_token_file((d / "x.h5").string(), TokenSplits{{1, 9}, {1}, 4}); },
                                 ErrorKind::kInvalidArgument, {"token 9", "[0, 4)"}));
}

TEST(Tokenize, BytesOfFilesInOrderWithValidationTail) {
  const test::TempDir dir("ht_data_test_tok");
  const fs::path& d = dir.path();
  std::ofstream(d / "a.txt") << "abcdefgh";
  std::ofstream(d / "b.txt") << "\xff" "ij";
  std::ofstream(d / "a.dat") << "index";  // fortune index files are skipped
  const TokenSplits s = tokenize_bytes({d.string()}, 0.2);
  std::vector<std::int32_t> all(s.train);
  all.insert(all.end(), s.val.begin(), s.val.end());
  EXPECT_EQ(all, (std::vector<std::int32_t>{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 255, 'i', 'j'}));
  EXPECT_EQ(s.val.size(), 2u);
  EXPECT_EQ(s.vocab_size, 256);
  EXPECT_TRUE(test::throws_error([&] { tokenize_bytes({(d / "nope").string()}, 0.1); }, ErrorKind::kIo, {"nope"}));
  std::ofstream(d / "tiny.txt") << "ab";
  EXPECT_TRUE(test::throws_error([&] { tokenize_bytes({(d / "tiny.txt").string()}, 0.1); },
                                 ErrorKind::kInvalidArgument, {"too few"}));
}

std::vector<std::int32_t> iota_tokens(int n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[std::size_t(i)] = i;
  return v;
}

TEST(BatchSampler, TargetsAreTokensShiftedByOne) {
  const auto tokens = iota_tokens(100);
  BatchSampler s(tokens, 7, 3, 1);
  const MicroBatch b = s.next();
  ASSERT_EQ(b.input.shape(), (Shape{3, 7}));
  ASSERT_EQ(b.target.shape(), (Shape{3, 7}));
  const auto t = b.input.to_vector<std::int32_t>(), g = b.target.to_vector<std::int32_t>();
  for (std::size_t i = 0; i < t.size(); ++i) EXPECT_EQ(g[i], t[i] + 1);
  for (std::size_t r = 0; r < 3; ++r) EXPECT_LE(t[r * 7 + 6] + 1, 99);  // windows stay inside the array
}

TEST(BatchSampler, RankSlicesTileTheGlobalBatchAndResumeExactly) {
  const auto tokens = iota_tokens(1000);
  BatchSampler whole(tokens, 5, 4, 9);
  BatchSampler r0(tokens, 5, 2, 9, 0, 2), r1(tokens, 5, 2, 9, 1, 2);
  for (int step = 0; step < 3; ++step) {
    const auto w = whole.next().input.to_vector<std::int32_t>();
    auto a = r0.next().input.to_vector<std::int32_t>();
    const auto b = r1.next().input.to_vector<std::int32_t>();
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_EQ(a, w) << "step " << step;
  }
  BatchSampler resumed(tokens, 5, 4, 9);
  resumed.set_position(whole.position());
  EXPECT_EQ(resumed.next().input.to_vector<std::int32_t>(), whole.next().input.to_vector<std::int32_t>());
}

TEST(BatchSampler, TooShortDatasetIsAnError) {
  const auto tokens = iota_tokens(5);
  EXPECT_TRUE(test::throws_error([&] { BatchSampler(tokens, 5, 1, 0); }, ErrorKind::kInvalidArgument,
                                 {"too short", "5 tokens"}));
}

// TokenBatches keeps the DataSource contract: dp ranks' shares of a step tile
// what one process with dp x the rows draws, state() / restore() resume the
// sequence exactly, and misuse is refused by name.
TEST(TokenBatches, DpSharesTileTheGlobalBatchAndStateResumesExactly) {
  TokenSplits splits{iota_tokens(1000), iota_tokens(50), 1000};
  TokenBatches whole(splits, 5), r0(splits, 5), r1(splits, 5);
  whole.attach({.dp_rank = 0, .dp_size = 1, .micro_batch = 4, .seed = 9});
  r0.attach({.dp_rank = 0, .dp_size = 2, .micro_batch = 2, .seed = 9});
  r1.attach({.dp_rank = 1, .dp_size = 2, .micro_batch = 2, .seed = 9});
  for (int step = 0; step < 3; ++step) {
    const MicroBatch w = whole.next(), a = r0.next(), b = r1.next();
    auto got = a.input.to_vector<std::int32_t>(), got_target = a.target.to_vector<std::int32_t>();
    const auto bi = b.input.to_vector<std::int32_t>(), bt = b.target.to_vector<std::int32_t>();
    got.insert(got.end(), bi.begin(), bi.end());
    got_target.insert(got_target.end(), bt.begin(), bt.end());
    EXPECT_EQ(got, w.input.to_vector<std::int32_t>()) << "step " << step;
    EXPECT_EQ(got_target, w.target.to_vector<std::int32_t>()) << "step " << step;
  }
  ASSERT_TRUE(whole.has_validation());
  EXPECT_EQ(whole.validation(1).input.to_vector<std::int32_t>(), whole.validation(1).input.to_vector<std::int32_t>())
      << "the same validation batch for the same index";

  const ClientState saved = whole.state();
  ASSERT_TRUE(saved.count("position"));
  const auto next = whole.next().input.to_vector<std::int32_t>();
  TokenBatches resumed(splits, 5);
  resumed.attach({.dp_rank = 0, .dp_size = 1, .micro_batch = 4, .seed = 9});
  resumed.restore(saved);
  EXPECT_EQ(resumed.state(), saved);
  EXPECT_EQ(resumed.next().input.to_vector<std::int32_t>(), next);

  EXPECT_TRUE(test::throws_error([&] { resumed.restore({{"position", std::string("12")}}); },
                                 ErrorKind::kCorruption, {"'position'"}));
  EXPECT_TRUE(test::throws_error([&] { resumed.restore({}); }, ErrorKind::kCorruption, {"'position'"}));
  TokenBatches unattached(splits, 5);
  EXPECT_TRUE(test::throws_error([&] { unattached.next(); }, ErrorKind::kInvalidArgument, {"before attach()"}));
  EXPECT_TRUE(test::throws_error([&] { TokenBatches(splits, 0); }, ErrorKind::kConfig, {"--seq-len", "0"}));
  TokenSplits no_val{iota_tokens(100), {}, 100};
  TokenBatches train_only(no_val, 5);
  train_only.attach({});
  EXPECT_FALSE(train_only.has_validation());
  EXPECT_TRUE(test::throws_error([&] { train_only.validation(0); }, ErrorKind::kNotSupported, {"no validation"}));
  TokenBatches too_long(no_val, 100);
  EXPECT_TRUE(test::throws_error([&] { too_long.attach({}); }, ErrorKind::kInvalidArgument, {"too short"}));
}

TEST(UnigramEntropy, UniformAndDegenerate) {
  EXPECT_NEAR(unigram_entropy({0, 1, 2, 3}, 4), std::log(4.0), 1e-12);
  EXPECT_NEAR(unigram_entropy({2, 2, 2}, 4), 0.0, 1e-12);
}

}  // namespace
}  // namespace ht::data
