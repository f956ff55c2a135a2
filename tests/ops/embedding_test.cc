// Token + position embedding: forward exactly, backward against finite
// differences (repeated tokens included), accumulation, determinism across
// thread counts, token ids out of range, and vocabulary shards that combine
// to the unsharded op.
#include "ht/ops/embedding.h"

#include <gtest/gtest.h>

#include <cstring>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::embedding_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

Tensor random_tokens(std::int64_t b, std::int64_t t, std::int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> dist(0, std::int32_t(vocab - 1));
  std::vector<std::int32_t> ids(std::size_t(b * t));
  for (auto& id : ids) id = dist(rng);
  return Tensor::from_vector(ids, {b, t});
}

struct Case {
  std::int64_t b, t, vocab, c, t_max;
};
// Small vocabularies force repeated tokens; c = 65 and 130 span several column blocks.
const Case kCases[] = {{1, 1, 1, 1, 1}, {2, 3, 5, 7, 3}, {3, 11, 4, 13, 16}, {2, 7, 50, 65, 7}, {1, 5, 3, 130, 9},
                       {0, 4, 6, 3, 4}};

TEST(Embedding, ForwardIsExact) {
  std::mt19937 rng(31);
  for (auto [b, t, vocab, c, t_max] : kCases) {
    for (bool with_pos : {true, false}) {
      SCOPED_TRACE(::testing::Message() << b << "x" << t << " V " << vocab << " C " << c << " pos " << with_pos);
      Tensor tokens = random_tokens(b, t, vocab, rng);
      Tensor wte = random_tensor({vocab, c}, rng);
      Tensor wpe = with_pos ? random_tensor({t_max, c}, rng) : Tensor();
      Tensor out = test::nan_tensor({b, t, c});
      embedding_forward(tokens, wte, wpe, out);
      const auto ids = tokens.to_vector<std::int32_t>();
      const auto vte = wte.to_vector<float>(), vo = out.to_vector<float>();
      const auto vpe = with_pos ? wpe.to_vector<float>() : std::vector<float>();
      for (std::int64_t i = 0; i < b * t; ++i)
        for (std::int64_t j = 0; j < c; ++j) {
          float want = vte[std::size_t(ids[std::size_t(i)] * c + j)];
          if (with_pos) want += vpe[std::size_t((i % t) * c + j)];
          ASSERT_EQ(vo[std::size_t(i * c + j)], want) << "token " << i << " channel " << j;
        }
    }
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  std::mt19937 rng(32);
  for (auto [b, t, vocab, c, t_max] : kCases) {
    SCOPED_TRACE(::testing::Message() << b << "x" << t << " V " << vocab << " C " << c);
    Tensor tokens = random_tokens(b, t, vocab, rng);
    Tensor wte = random_tensor({vocab, c}, rng), wpe = random_tensor({t_max, c}, rng);
    Tensor w = random_tensor({b, t, c}, rng);  // L = sum w * out
    Tensor dwte = random_tensor({vocab, c}, rng), dwpe = random_tensor({t_max, c}, rng);  // accumulate onto these
    const auto dwte0 = test::to_double(dwte), dwpe0 = test::to_double(dwpe);
    embedding_backward(w, tokens, dwte, dwpe);

    const auto ids = tokens.to_vector<std::int32_t>();
    const auto vw = test::to_double(w), vte = test::to_double(wte), vpe = test::to_double(wpe);
    auto loss = [&](const std::vector<double>& te, const std::vector<double>& pe) {
      double l = 0;
      for (std::int64_t i = 0; i < b * t; ++i)
        for (std::int64_t j = 0; j < c; ++j)
          l += vw[std::size_t(i * c + j)] *
               (te[std::size_t(ids[std::size_t(i)] * c + j)] + pe[std::size_t((i % t) * c + j)]);
      return l;
    };
    auto want_te = finite_diff_grad([&](const auto& v) { return loss(v, vpe); }, vte);
    auto want_pe = finite_diff_grad([&](const auto& v) { return loss(vte, v); }, vpe);
    for (std::size_t i = 0; i < want_te.size(); ++i) want_te[i] += dwte0[i];
    for (std::size_t i = 0; i < want_pe.size(); ++i) want_pe[i] += dwpe0[i];
    EXPECT_TRUE(all_close(dwte.to_vector<float>(), want_te, 1e-5)) << "dwte";
    EXPECT_TRUE(all_close(dwpe.to_vector<float>(), want_pe, 1e-5)) << "dwpe";
  }
}

TEST(Embedding, RepeatedTokenSumsItsGradients) {
  // Tokens [[2, 0, 2], [2, 1, 0]], C = 2: row 2 of dwte gets three rows of dout.
  Tensor tokens = Tensor::from_vector(std::vector<std::int32_t>{2, 0, 2, 2, 1, 0}, {2, 3});
  std::vector<float> g(12);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = float(i + 1);  // rows (1,2) (3,4) ... (11,12)
  Tensor dout = Tensor::from_vector(g, {2, 3, 2});
  Tensor dwte = Tensor::zeros({4, 2}, DType::kF32), dwpe = Tensor::zeros({3, 2}, DType::kF32);
  embedding_backward(dout, tokens, dwte, dwpe);
  EXPECT_EQ(dwte.to_vector<float>(), (std::vector<float>{3 + 11, 4 + 12, 9, 10, 1 + 5 + 7, 2 + 6 + 8, 0, 0}));
  EXPECT_EQ(dwpe.to_vector<float>(), (std::vector<float>{1 + 7, 2 + 8, 3 + 9, 4 + 10, 5 + 11, 6 + 12}));
  // Without a position table only dwte moves, and it accumulates again.
  Tensor none;
  embedding_backward(dout, tokens, dwte, none);
  EXPECT_EQ(dwte.to_vector<float>(), (std::vector<float>{28, 32, 18, 20, 26, 32, 0, 0}));
}

#if defined(_OPENMP)
TEST(Embedding, BackwardSameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(33);
  const std::int64_t b = 4, t = 64, vocab = 17, c = 200;  // many repeats, four column blocks
  Tensor tokens = random_tokens(b, t, vocab, rng);
  Tensor dout = random_tensor({b, t, c}, rng);
  std::vector<std::vector<float>> te, pe;
  for (int threads : {1, 2}) {
    Tensor dwte = Tensor::zeros({vocab, c}, DType::kF32), dwpe = Tensor::zeros({t, c}, DType::kF32);
    test::with_omp_threads(threads, [&] { embedding_backward(dout, tokens, dwte, dwpe); });
    te.push_back(dwte.to_vector<float>());
    pe.push_back(dwpe.to_vector<float>());
  }
  EXPECT_EQ(std::memcmp(te[0].data(), te[1].data(), te[0].size() * 4), 0);
  EXPECT_EQ(std::memcmp(pe[0].data(), pe[1].data(), pe[0].size() * 4), 0);
}
#endif

TEST(Embedding, TokenOutOfRangeNamesIt) {
  Tensor wte = Tensor::zeros({50, 4}, DType::kF32), wpe = Tensor::zeros({8, 4}, DType::kF32);
  Tensor out = Tensor::zeros({2, 3, 4}, DType::kF32);
  Tensor big = Tensor::from_vector(std::vector<std::int32_t>{0, 1, 2, 3, 4, 1234}, {2, 3});
  EXPECT_TRUE(throws_error([&] { embedding_forward(big, wte, wpe, out); }, ErrorKind::kOutOfRange,
                           {"token id 1234", "batch row 1, position 2", "[0, 50)"}));
  Tensor neg = Tensor::from_vector(std::vector<std::int32_t>{0, -1, 2, 3, 4, 5}, {2, 3});
  EXPECT_TRUE(throws_error([&] { embedding_forward(neg, wte, wpe, out); }, ErrorKind::kOutOfRange,
                           {"token id -1", "batch row 0, position 1"}));
  Tensor edge = Tensor::from_vector(std::vector<std::int32_t>{50, 0, 0, 0, 0, 0}, {2, 3});
  Tensor dwte = Tensor::zeros({50, 4}, DType::kF32), dwpe = Tensor::zeros({8, 4}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { embedding_backward(out, edge, dwte, dwpe); }, ErrorKind::kOutOfRange,
                           {"token id 50", "[0, 50)"}));
  // Nothing was scattered before the check.
  for (float v : dwte.to_vector<float>()) EXPECT_EQ(v, 0.f);
}

// The first row of each of k shards of a vocabulary, then vocab: shard r
// holds rows [starts[r], starts[r + 1]). The first vocab % k shards take one
// row more, so a vocabulary that k does not divide gives unequal shards
// (50 in 3: 17, 17, 16; 2 in 3: 1, 1, 0).
std::vector<std::int64_t> shard_bounds(std::int64_t vocab, std::int64_t k) {
  std::vector<std::int64_t> b{0};
  for (std::int64_t r = 0; r < k; ++r) b.push_back(b.back() + vocab / k + (r < vocab % k ? 1 : 0));
  return b;
}

struct ShardCase {
  std::int64_t b, t, vocab, c, t_max, shards;
};
const ShardCase kShardCases[] = {{2, 7, 50, 65, 7, 2}, {2, 7, 50, 65, 9, 3}, {3, 11, 7, 13, 16, 2},
                                 {3, 11, 7, 13, 11, 3}, {4, 5, 2, 3, 5, 3},  {1, 9, 1000, 130, 9, 3}};

TEST(Embedding, VocabShardsCombineToUnsharded) {
  std::mt19937 rng(34);
  for (auto [b, t, vocab, c, t_max, k] : kShardCases) {
    SCOPED_TRACE(::testing::Message() << b << "x" << t << " V " << vocab << " C " << c << " shards " << k);
    const auto bounds = shard_bounds(vocab, k);
    Tensor tokens = random_tokens(b, t, vocab, rng);
    Tensor wte = random_tensor({vocab, c}, rng), wpe = random_tensor({t_max, c}, rng);
    Tensor dout = random_tensor({b, t, c}, rng);
    Tensor dwte_init = random_tensor({vocab, c}, rng), dwpe_init = random_tensor({t_max, c}, rng);

    Tensor want_out = test::nan_tensor({b, t, c});
    embedding_forward(tokens, wte, wpe, want_out);
    Tensor want_dwte = dwte_init.clone(), want_dwpe = dwpe_init.clone();
    embedding_backward(dout, tokens, want_dwte, want_dwpe);

    // Each shard on its own, as each tensor-parallel rank would run it: the
    // position term from shard 0 only, outputs summed (an all-reduce), and
    // each shard's dwte rows laid side by side (its slice of the table).
    std::vector<double> sum(std::size_t(b * t * c), 0.0);
    std::vector<float> dwte_cat;
    for (std::int64_t r = 0; r < k; ++r) {
      const VocabShard shard{bounds[std::size_t(r)], vocab};
      const std::int64_t rows = bounds[std::size_t(r) + 1] - bounds[std::size_t(r)];
      Tensor wte_r = wte.slice(shard.start, shard.start + rows).clone();
      Tensor out_r = test::nan_tensor({b, t, c});
      embedding_forward(tokens, wte_r, r == 0 ? wpe : Tensor(), out_r, shard);
      const auto v = out_r.to_vector<float>();
      for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];

      Tensor dwte_r = dwte_init.slice(shard.start, shard.start + rows).clone();
      Tensor dwpe_r = dwpe_init.clone();
      embedding_backward(dout, tokens, dwte_r, dwpe_r, shard);
      const auto d = dwte_r.to_vector<float>();
      dwte_cat.insert(dwte_cat.end(), d.begin(), d.end());
      // dwpe does not depend on the shard: every rank gets the whole sum.
      EXPECT_EQ(dwpe_r.to_vector<float>(), want_dwpe.to_vector<float>()) << "dwpe of shard " << r;
    }
    EXPECT_TRUE(all_close(want_out.to_vector<float>(), sum, 1e-6)) << "summed out";
    EXPECT_TRUE(all_close(dwte_cat, test::to_double(want_dwte), 1e-6)) << "concatenated dwte";
  }
}

TEST(Embedding, VocabShardWithoutPositionsIsZeroOffShard) {
  // Vocabulary 6 in two shards of 3: shard 1 holds ids 3..5 and writes zeros
  // for ids 0..2; backward scatters only its own ids, into local rows.
  Tensor tokens = Tensor::from_vector(std::vector<std::int32_t>{4, 0, 5, 4}, {1, 4});
  Tensor wte1 = Tensor::from_vector(std::vector<float>{30, 31, 40, 41, 50, 51}, {3, 2});  // ids 3, 4, 5
  Tensor out = test::nan_tensor({1, 4, 2});
  Tensor none;
  embedding_forward(tokens, wte1, none, out, {3, 6});
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{40, 41, 0, 0, 50, 51, 40, 41}));
  Tensor dout = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 4, 2});
  Tensor dwte1 = Tensor::zeros({3, 2}, DType::kF32);
  embedding_backward(dout, tokens, dwte1, none, {3, 6});
  EXPECT_EQ(dwte1.to_vector<float>(), (std::vector<float>{0, 0, 1 + 7, 2 + 8, 5, 6}));
}

TEST(Embedding, ShardedTokenOutOfRangeNamesTheFullVocabulary) {
  // Shard [10, 20) of a vocabulary of 30: 25 is valid (another shard's), 30 is not.
  Tensor wte = Tensor::zeros({10, 4}, DType::kF32), out = Tensor::zeros({1, 3, 4}, DType::kF32);
  Tensor ok = Tensor::from_vector(std::vector<std::int32_t>{25, 0, 12}, {1, 3});
  Tensor none;
  embedding_forward(ok, wte, none, out, {10, 30});
  Tensor bad = Tensor::from_vector(std::vector<std::int32_t>{25, 30, 12}, {1, 3});
  EXPECT_TRUE(throws_error([&] { embedding_forward(bad, wte, none, out, {10, 30}); }, ErrorKind::kOutOfRange,
                           {"token id 30", "batch row 0, position 1", "[0, 30)"}));
  Tensor dwte = Tensor::zeros({10, 4}, DType::kF32);
  Tensor neg = Tensor::from_vector(std::vector<std::int32_t>{12, 12, -1}, {1, 3});
  EXPECT_TRUE(throws_error([&] { embedding_backward(out, neg, dwte, none, {10, 30}); }, ErrorKind::kOutOfRange,
                           {"token id -1", "position 2", "[0, 30)"}));
  for (float v : dwte.to_vector<float>()) EXPECT_EQ(v, 0.f);
}

TEST(Embedding, BadVocabShardThrows) {
  Tensor tokens = Tensor::zeros({1, 2}, DType::kI32), wte = Tensor::zeros({10, 4}, DType::kF32);
  Tensor out = Tensor::zeros({1, 2, 4}, DType::kF32), none;
  // Past the end of the vocabulary, a negative start, a start without a size, a bad size.
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, wte, none, out, {25, 30}); }, ErrorKind::kInvalidArgument,
                           {"embedding_forward", "[25, 35)", "[0, 30)"}));
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, wte, none, out, {-1, 30}); }, ErrorKind::kInvalidArgument,
                           {"[-1, 9)"}));
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, wte, none, out, {5, -1}); }, ErrorKind::kInvalidArgument,
                           {"start 5", "size -1"}));
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, wte, none, out, {0, -2}); }, ErrorKind::kInvalidArgument,
                           {"size -2"}));
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, wte, none, out, {0, 9}); }, ErrorKind::kInvalidArgument,
                           {"[0, 10)", "[0, 9)"}));
  Tensor dwte = Tensor::zeros({10, 4}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { embedding_backward(out, tokens, dwte, none, {21, 30}); },
                           ErrorKind::kInvalidArgument, {"embedding_backward", "'dwte'", "[21, 31)"}));
  // The last shard exactly at the end is fine.
  embedding_forward(tokens, wte, none, out, {20, 30});
}

// f16 and bf16: wte, wpe, out, dout, dwte, dwpe in the 16-bit dtype against
// the f32 op on the same values. out is wte + wpe in f32 rounded once; dwte
// and dwpe start from their stored values and accumulate, within half_rtol
// (2e-3 f16, 1e-2 bf16), whole and sharded.
TEST(Embedding, HalfMatchesF32OnTheSameValues) {
  using test::random_half;
  std::mt19937 rng(40);
  for (DType dt : test::kHalfDtypes)
    for (auto [b, t, vocab, c, t_max] : kCases)
      for (bool with_pos : {true, false})
        for (VocabShard shard : {VocabShard{}, VocabShard{1, vocab + 2}}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << b << "x" << t << " V " << vocab << " C " << c
                                            << " pos " << with_pos << " shard " << shard.start << "/" << shard.size);
          const std::int64_t full = shard.size < 0 ? vocab : shard.size;
          const Tensor tokens = random_tokens(b, t, full, rng);
          const auto wte = random_half({vocab, c}, dt, rng);
          const auto wpe = with_pos ? random_half({t_max, c}, dt, rng) : test::HalfPair{};
          Tensor out16 = test::nan_half({b, t, c}, dt), out32 = test::nan_tensor({b, t, c});
          embedding_forward(tokens, wte.half, wpe.half, out16, shard);
          embedding_forward(tokens, wte.f32, wpe.f32, out32, shard);
          EXPECT_TRUE(test::rounded_once(out16, out32));

          const auto dout = random_half({b, t, c}, dt, rng);
          const auto dwte = random_half({vocab, c}, dt, rng, 2.f, 3.f);
          const auto dwpe = with_pos ? random_half({t_max, c}, dt, rng, -3.f, -2.f) : test::HalfPair{};
          Tensor dwte16 = dwte.half.clone(), dwte32 = dwte.f32.clone();
          Tensor dwpe16 = with_pos ? dwpe.half.clone() : Tensor(), dwpe32 = with_pos ? dwpe.f32.clone() : Tensor();
          embedding_backward(dout.half, tokens, dwte16, dwpe16, shard);
          embedding_backward(dout.f32, tokens, dwte32, dwpe32, shard);
          EXPECT_TRUE(test::half_close(dwte16, dwte32, dt));
          if (with_pos) EXPECT_TRUE(test::half_close(dwpe16, dwpe32, dt));
        }
}

TEST(Embedding, HalfBadTokenLeavesGradientsUnchanged) {
  const Tensor tokens = Tensor::from_vector(std::vector<std::int32_t>{1, 0, 9, 2}, {2, 2});
  Tensor dwte = test::cast_to(Tensor::from_vector(std::vector<float>(3 * 4, 0.5f), {3, 4}), DType::kBF16);
  Tensor no_wpe;
  const Tensor dout = Tensor::zeros({2, 2, 4}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { embedding_backward(dout, tokens, dwte, no_wpe); }, ErrorKind::kOutOfRange,
                           {"token id 9"}));
  for (float x : dwte.to_vector<float>()) EXPECT_EQ(x, 0.5f);
}

TEST(Embedding, HalfDtypesMustNotMix) {
  auto t = [](Shape s, DType d) { return Tensor::zeros(s, d); };
  const Tensor tokens = t({2, 3}, DType::kI32);
  Tensor out = t({2, 3, 4}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, t({10, 4}, DType::kF16), t({8, 4}, DType::kBF16), out); },
                           ErrorKind::kDTypeMismatch, {"embedding_forward", "'wpe' is bf16", "'wte' is f16"}));
  Tensor dwte = t({10, 4}, DType::kF16), dwpe = t({8, 4}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { embedding_backward(t({2, 3, 4}, DType::kF32), tokens, dwte, dwpe); },
                           ErrorKind::kDTypeMismatch, {"embedding_backward", "'dout' is f32", "'dwte' is f16"}));
  EXPECT_TRUE(throws_error([&] { embedding_forward(t({2, 3}, DType::kF16), t({10, 4}, DType::kF16), Tensor(), out); },
                           ErrorKind::kDTypeMismatch, {"'tokens' must be i32"}));
}

TEST(Embedding, ShapeAndDtypeErrors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor tokens = t({2, 3}, DType::kI32);
  Tensor out = t({2, 3, 4});
  EXPECT_TRUE(throws_error([&] { embedding_forward(t({2, 3}), t({10, 4}), t({8, 4}), out); },
                           ErrorKind::kDTypeMismatch, {"'tokens'", "i32"}));
  EXPECT_TRUE(throws_error([&] { embedding_forward(t({6}, DType::kI32), t({10, 4}), t({8, 4}), out); },
                           ErrorKind::kShapeMismatch, {"'tokens'", "2-d"}));
  Tensor out5 = t({2, 3, 5});
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, t({10, 4}), t({8, 4}), out5); }, ErrorKind::kShapeMismatch,
                           {"[2, 3, 4]", "[2, 3, 5]"}));
  // The sequence is longer than the position table.
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, t({10, 4}), t({2, 4}), out); }, ErrorKind::kShapeMismatch,
                           {"wpe", "[2, 4]", "longer than the model's context"}));
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, t({10, 4}), t({8, 5}), out); }, ErrorKind::kShapeMismatch,
                           {"wpe"}));
  EXPECT_TRUE(throws_error([&] { embedding_forward(tokens, t({10, 4}, DType::kBF16), t({8, 4}), out); },
                           ErrorKind::kDTypeMismatch, {"'wte'"}));
  Tensor dwte = t({10, 4}), dwpe = t({8, 4});
  EXPECT_TRUE(throws_error([&] { embedding_backward(t({2, 3, 3}), tokens, dwte, dwpe); }, ErrorKind::kShapeMismatch,
                           {"embedding_backward"}));
}

}  // namespace
}  // namespace ht::ops::embedding_test
