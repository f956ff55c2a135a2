// Token files (HDF5 round trip, bad files), token windows as functions of
// the sample index, the engine's sample ranges (training and validation,
// every layout), TokenBatches as a random-access DataSource, and the
// unigram entropy.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "ht/data/sample_ranges.h"
#include "ht/data/token_batches.h"
#include "ht/data/token_dataset.h"
#include "ht/data/token_windows.h"
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

TEST(TokenWindows, TargetsAreTokensShiftedByOne) {
  const auto tokens = iota_tokens(100);
  const TokenWindows w(tokens, 7);
  const MicroBatch b = w.random(1, 0, 3);
  ASSERT_EQ(b.input.shape(), (Shape{3, 7}));
  ASSERT_EQ(b.target.shape(), (Shape{3, 7}));
  const auto t = b.input.to_vector<std::int32_t>(), g = b.target.to_vector<std::int32_t>();
  for (std::size_t i = 0; i < t.size(); ++i) EXPECT_EQ(g[i], t[i] + 1);
  for (std::size_t r = 0; r < 3; ++r) EXPECT_LE(t[r * 7 + 6] + 1, 99);  // windows stay inside the array
  const auto s = w.sequential(13, 2).input.to_vector<std::int32_t>();  // 14 windows of 7: 13 and 0
  EXPECT_EQ(s[0], 13 * 7);
  EXPECT_EQ(s[7], 0);
}

// A sample is a function of its index: any range of a random or sequential
// draw equals the matching rows of a larger one, whatever the range.
TEST(TokenWindows, SampleIsAFunctionOfItsIndex) {
  const auto tokens = iota_tokens(1000);
  const TokenWindows w(tokens, 5);
  const auto whole = w.random(9, 0, 12).input.to_vector<std::int32_t>();
  for (std::int64_t first = 0; first < 12; ++first)
    for (std::int64_t count = 1; first + count <= 12; ++count) {
      const auto part = w.random(9, first, count).input.to_vector<std::int32_t>();
      EXPECT_EQ(part, std::vector<std::int32_t>(whole.begin() + first * 5, whole.begin() + (first + count) * 5))
          << "[" << first << ", " << first + count << ")";
    }
  EXPECT_NE(w.random(10, 0, 12).input.to_vector<std::int32_t>(), whole) << "another seed, other windows";
  const auto five = w.sequential(0, 5).input.to_vector<std::int32_t>();
  EXPECT_EQ(w.sequential(3, 2).input.to_vector<std::int32_t>(), std::vector<std::int32_t>(five.begin() + 15, five.end()));
}

TEST(TokenWindows, TooShortDatasetIsAnError) {
  const auto tokens = iota_tokens(5);
  EXPECT_TRUE(test::throws_error([&] { TokenWindows(tokens, 5); }, ErrorKind::kInvalidArgument,
                                 {"too short", "5 tokens"}));
}

// Every layout's training micro-batches of a step tile the same global
// samples, rank by rank and micro-batch by micro-batch (data_source.h's
// worked example included), and one process with dp x the rows reads
// micro-batch j of all ranks at once.
TEST(SampleRanges, TrainingRangesTileEachStep) {
  EXPECT_EQ(training_range(32, 0, 1, 2, 4), (SampleRange{36, 4}));
  EXPECT_EQ(training_range(32, 1, 1, 2, 4), (SampleRange{44, 4}));
  for (int dp : {1, 2, 3, 4})
    for (int k : {1, 2, 3})
      for (std::int64_t rows : {1, 2, 5}) {
        const std::int64_t global = rows * k * dp, consumed = 7 * global;
        std::vector<int> seen(std::size_t(global), 0);
        for (int j = 0; j < k; ++j) {
          for (int d = 0; d < dp; ++d) {
            const SampleRange r = training_range(consumed, j, d, dp, rows);
            ASSERT_EQ(r.count, rows);
            for (std::int64_t i = r.first; i < r.first + r.count; ++i) ++seen[std::size_t(i - consumed)];
          }
          const SampleRange one = training_range(consumed, j, 0, 1, rows * dp);
          EXPECT_EQ(one.first, training_range(consumed, j, 0, dp, rows).first);
        }
        EXPECT_EQ(seen, std::vector<int>(std::size_t(global), 1)) << "dp " << dp << " k " << k << " rows " << rows;
      }
}

// Validation covers [0, samples) exactly once under every layout, every rank
// runs as many micro-batches as the others, none is empty, and none exceeds
// rows + 1.
TEST(SampleRanges, ValidationRangesCoverTheSetOnceOnEveryLayout) {
  for (std::int64_t samples : {1, 2, 3, 7, 8, 16, 31, 64, 100})
    for (int dp : {1, 2, 3, 4, 5})
      for (std::int64_t rows : {1, 2, 3, 8}) {
        if (samples < dp) {
          EXPECT_TRUE(test::throws_error([&] { validation_ranges(samples, 0, dp, rows); }, ErrorKind::kConfig,
                                         {"--eval-samples", "at least"}));
          continue;
        }
        std::vector<int> seen(std::size_t(samples), 0);
        std::size_t count = 0;
        for (int d = 0; d < dp; ++d) {
          const std::vector<SampleRange> ranges = validation_ranges(samples, d, dp, rows);
          if (d == 0) count = ranges.size();
          EXPECT_EQ(ranges.size(), count) << "rank " << d << " runs another number of forwards";
          for (const SampleRange& r : ranges) {
            EXPECT_GE(r.count, 1);
            EXPECT_LE(r.count, rows + 1);
            for (std::int64_t i = r.first; i < r.first + r.count; ++i) ++seen[std::size_t(i)];
          }
        }
        EXPECT_EQ(seen, std::vector<int>(std::size_t(samples), 1))
            << samples << " samples, dp " << dp << ", rows " << rows;
      }
  EXPECT_TRUE(validation_ranges(0, 0, 2, 4).empty());
}

// TokenBatches is random access: a dp rank's range equals those rows of one
// process's larger range, validation likewise, and misuse is refused by name.
TEST(TokenBatches, RandomAccessSamplesAndValidation) {
  TokenSplits splits{iota_tokens(1000), iota_tokens(50), 1000};
  TokenBatches whole(splits, 5), part(splits, 5);
  whole.attach({.seed = 9});
  part.attach({.dp_rank = 1, .dp_size = 2, .micro_batch = 2, .seed = 9});
  EXPECT_TRUE(whole.random_access());
  const auto w = whole.samples(8, 4), p = part.samples(10, 2);
  const auto wi = w.input.to_vector<std::int32_t>(), wt = w.target.to_vector<std::int32_t>();
  EXPECT_EQ(p.input.to_vector<std::int32_t>(), std::vector<std::int32_t>(wi.begin() + 10, wi.end()));
  EXPECT_EQ(p.target.to_vector<std::int32_t>(), std::vector<std::int32_t>(wt.begin() + 10, wt.end()));
  ASSERT_TRUE(whole.has_validation());
  EXPECT_EQ(whole.validation_samples(1, 2).input.to_vector<std::int32_t>(),
            part.validation_samples(1, 2).input.to_vector<std::int32_t>());

  TokenBatches unattached(splits, 5);
  EXPECT_TRUE(test::throws_error([&] { unattached.samples(0, 1); }, ErrorKind::kInvalidArgument, {"before attach()"}));
  EXPECT_TRUE(test::throws_error([&] { TokenBatches(splits, 0); }, ErrorKind::kConfig, {"--seq-len", "0"}));
  TokenSplits no_val{iota_tokens(100), {}, 100};
  TokenBatches train_only(no_val, 5);
  train_only.attach({});
  EXPECT_FALSE(train_only.has_validation());
  EXPECT_TRUE(test::throws_error([&] { train_only.validation_samples(0, 1); }, ErrorKind::kNotSupported,
                                 {"no validation"}));
  TokenBatches too_long(no_val, 100);
  EXPECT_TRUE(test::throws_error([&] { too_long.attach({}); }, ErrorKind::kInvalidArgument, {"too short"}));
}

// A source that says nothing says so by name.
TEST(DataSource, DefaultsNameWhatIsMissing) {
  struct Nothing : DataSource {} nothing;
  EXPECT_TRUE(test::throws_error([&] { nothing.samples(3, 2); }, ErrorKind::kNotSupported, {"[3, 5)", "samples"}));
  EXPECT_TRUE(test::throws_error([&] { nothing.next(); }, ErrorKind::kNotSupported, {"stream", "next()"}));
  EXPECT_TRUE(
      test::throws_error([&] { nothing.validation_samples(0, 1); }, ErrorKind::kNotSupported, {"--eval-samples 0"}));
}

TEST(UnigramEntropy, UniformAndDegenerate) {
  EXPECT_NEAR(unigram_entropy({0, 1, 2, 3}, 4), std::log(4.0), 1e-12);
  EXPECT_NEAR(unigram_entropy({2, 2, 2}, 4), 0.0, 1e-12);
}

}  // namespace
}  // namespace ht::data
