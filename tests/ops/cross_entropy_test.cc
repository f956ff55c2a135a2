// Fused softmax cross-entropy: losses and log-sum-exp against a double
// reference, dlogits = (softmax - onehot) * dloss and against finite
// differences, numerical stability, aliasing, targets out of range, and
// vocabulary shards whose statistics and gradients combine to the unsharded op.
#include "ht/ops/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::cross_entropy_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

Tensor random_targets(std::int64_t n, std::int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> dist(0, std::int32_t(vocab - 1));
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, {n});
}

// Per-row log-sum-exp of logits (n, v), in double.
std::vector<double> lse_ref(const std::vector<double>& logits, std::int64_t n, std::int64_t v) {
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const double* row = logits.data() + i * v;
    const double mx = *std::max_element(row, row + v);
    double s = 0;
    for (std::int64_t j = 0; j < v; ++j) s += std::exp(row[j] - mx);
    out[std::size_t(i)] = mx + std::log(s);
  }
  return out;
}

struct Case {
  std::int64_t n, v;
};
const Case kCases[] = {{0, 5}, {1, 1}, {1, 2}, {3, 7}, {8, 64}, {5, 257}, {13, 1000}};

TEST(CrossEntropy, ForwardMatchesDoubleReference) {
  std::mt19937 rng(41);
  for (auto [n, v] : kCases) {
    for (float offset : {0.f, 80.f}) {  // 80: exp would overflow without the max shift
      SCOPED_TRACE(::testing::Message() << n << "x" << v << " offset " << offset);
      Tensor logits = random_tensor({n, v}, rng, offset - 4.f, offset + 4.f);
      Tensor targets = random_targets(n, v, rng);
      Tensor losses = test::nan_tensor({n}), lse = test::nan_tensor({n});
      cross_entropy_forward(logits, targets, losses, lse);
      const auto vl = test::to_double(logits);
      const auto want_lse = lse_ref(vl, n, v);
      const auto tg = targets.to_vector<std::int32_t>();
      std::vector<double> want_loss(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i)
        want_loss[std::size_t(i)] = want_lse[std::size_t(i)] - vl[std::size_t(i * v + tg[std::size_t(i)])];
      // lse is near the offset, the loss near log(V): compare each with its own scale.
      EXPECT_TRUE(all_close(lse.to_vector<float>(), want_lse, 1e-6));
      EXPECT_TRUE(all_close(losses.to_vector<float>(), want_loss, 1e-5, 1e-5 * (1 + offset)));
      for (float l : losses.to_vector<float>()) EXPECT_TRUE(std::isfinite(l));
    }
  }
}

TEST(CrossEntropy, KnownValues) {
  // Uniform logits: loss = log(V). V = 1: loss 0.
  Tensor logits = Tensor::zeros({2, 4}, DType::kF32);
  Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{0, 3}, {2});
  Tensor losses = Tensor::empty({2}, DType::kF32), lse = Tensor::empty({2}, DType::kF32);
  cross_entropy_forward(logits, targets, losses, lse);
  EXPECT_FLOAT_EQ(losses.item(0), std::log(4.f));
  EXPECT_FLOAT_EQ(losses.item(1), std::log(4.f));
  Tensor one = Tensor::from_vector(std::vector<float>{7.5f}, {1, 1});
  Tensor t0 = Tensor::from_vector(std::vector<std::int32_t>{0}, {1});
  Tensor l1 = Tensor::empty({1}, DType::kF32), s1 = Tensor::empty({1}, DType::kF32);
  cross_entropy_forward(one, t0, l1, s1);
  EXPECT_EQ(l1.item(), 0.f);
  EXPECT_EQ(s1.item(), 7.5f);
}

TEST(CrossEntropy, BackwardIsSoftmaxMinusOnehotTimesDloss) {
  std::mt19937 rng(42);
  for (auto [n, v] : kCases) {
    SCOPED_TRACE(::testing::Message() << n << "x" << v);
    Tensor logits = random_tensor({n, v}, rng, -3.f, 3.f);
    Tensor targets = random_targets(n, v, rng);
    Tensor losses = Tensor::empty({n}, DType::kF32), lse = Tensor::empty({n}, DType::kF32);
    cross_entropy_forward(logits, targets, losses, lse);
    const float dloss = n ? 1.f / float(n) : 1.f;  // a mean over rows
    Tensor dlogits = test::nan_tensor({n, v});  // overwritten
    cross_entropy_backward(logits, targets, lse, dloss, dlogits);

    const auto vl = test::to_double(logits);
    const auto tg = targets.to_vector<std::int32_t>();
    const auto l = lse_ref(vl, n, v);
    std::vector<double> want(vl.size());
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < v; ++j) {
        const std::size_t k = std::size_t(i * v + j);
        want[k] = (std::exp(vl[k] - l[std::size_t(i)]) - (j == tg[std::size_t(i)] ? 1.0 : 0.0)) * dloss;
      }
    EXPECT_TRUE(all_close(dlogits.to_vector<float>(), want, 1e-5));

    // The same against finite differences of the mean loss, for the small cases.
    if (n * v <= 600) {
      const auto fd = finite_diff_grad(
          [&](const std::vector<double>& x) {
            const auto lx = lse_ref(x, n, v);
            double total = 0;
            for (std::int64_t i = 0; i < n; ++i)
              total += lx[std::size_t(i)] - x[std::size_t(i * v + tg[std::size_t(i)])];
            return total * dloss;
          },
          vl);
      EXPECT_TRUE(all_close(dlogits.to_vector<float>(), fd, 1e-5)) << "finite differences";
    }
    // Each row of the gradient sums to zero.
    const auto got = dlogits.to_vector<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < v; ++j) s += got[std::size_t(i * v + j)];
      EXPECT_NEAR(s, 0.0, 1e-6);
    }
  }
}

TEST(CrossEntropy, BackwardInPlaceOverLogits) {
  std::mt19937 rng(43);
  const std::int64_t n = 6, v = 33;
  Tensor logits = random_tensor({n, v}, rng, -2.f, 2.f);
  Tensor targets = random_targets(n, v, rng);
  Tensor losses = Tensor::empty({n}, DType::kF32), lse = Tensor::empty({n}, DType::kF32);
  cross_entropy_forward(logits, targets, losses, lse);
  Tensor separate = Tensor::empty({n, v}, DType::kF32);
  cross_entropy_backward(logits, targets, lse, 0.25f, separate);
  cross_entropy_backward(logits, targets, lse, 0.25f, logits);  // dlogits aliases logits
  EXPECT_EQ(logits.to_vector<float>(), separate.to_vector<float>());
}

TEST(CrossEntropy, TargetOutOfRangeNamesIt) {
  Tensor logits = Tensor::zeros({3, 10}, DType::kF32), losses = Tensor::zeros({3}, DType::kF32);
  Tensor lse = Tensor::zeros({3}, DType::kF32);
  Tensor big = Tensor::from_vector(std::vector<std::int32_t>{1, 2, 10}, {3});
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(logits, big, losses, lse); }, ErrorKind::kOutOfRange,
                           {"target 10", "row 2", "[0, 10)"}));
  Tensor neg = Tensor::from_vector(std::vector<std::int32_t>{-3, 2, 1}, {3});
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(logits, neg, losses, lse); }, ErrorKind::kOutOfRange,
                           {"target -3", "row 0"}));
  Tensor dlogits = Tensor::zeros({3, 10}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(logits, big, lse, 1.f, dlogits); }, ErrorKind::kOutOfRange,
                           {"target 10"}));
}

// Ignored rows count 0 and get a zero gradient; any other target outside the
// vocabulary is still an error, which names the ignore index. (Values with
// label smoothing against PyTorch: tests/reference/ops_torch_check.py.)
TEST(CrossEntropy, IgnoreIndexSkipsItsRowsOnly) {
  const CrossEntropyOptions o{.ignore_index = -100};
  Tensor logits = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor losses = test::nan_tensor({3}), lse = test::nan_tensor({3});
  Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{1, -100, 0}, {3});
  cross_entropy_forward(logits, targets, losses, lse, o);
  const auto l = losses.to_vector<float>();
  EXPECT_EQ(l[1], 0.f);
  EXPECT_NEAR(l[0], std::log(1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(l[2], std::log(1.0 + std::exp(1.0)), 1e-6);
  Tensor dlogits = test::nan_tensor({3, 2});
  cross_entropy_backward(logits, targets, lse, 1.f, dlogits, {}, o);
  const auto d = dlogits.to_vector<float>();
  EXPECT_EQ(d[2], 0.f);
  EXPECT_EQ(d[3], 0.f);
  EXPECT_NE(d[0], 0.f);
  Tensor bad = Tensor::from_vector(std::vector<std::int32_t>{1, -99, 0}, {3});
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(logits, bad, losses, lse, o); }, ErrorKind::kOutOfRange,
                           {"target -99", "row 1", "not the ignore index -100"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(logits, targets, losses, lse, {.label_smoothing = 1.f}); },
                           ErrorKind::kInvalidArgument, {"label_smoothing 1"}));
}

// The first column of each of k shards of a vocabulary, then vocab; the first
// vocab % k shards take one column more (1000 in 3: 334, 333, 333; 2 in 3:
// 1, 1, 0).
std::vector<std::int64_t> shard_bounds(std::int64_t vocab, std::int64_t k) {
  std::vector<std::int64_t> b{0};
  for (std::int64_t r = 0; r < k; ++r) b.push_back(b.back() + vocab / k + (r < vocab % k ? 1 : 0));
  return b;
}

/// Columns [begin, end) of a host (n, v) f32 matrix, as a new tensor.
Tensor columns(const Tensor& m, std::int64_t begin, std::int64_t end) {
  const std::int64_t n = m.size(0), v = m.size(1);
  const auto all = m.to_vector<float>();
  std::vector<float> out;
  for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), all.begin() + i * v + begin, all.begin() + i * v + end);
  return Tensor::from_vector(out, {n, end - begin});
}

struct ShardCase {
  std::int64_t n, v, shards;
};
const ShardCase kShardCases[] = {{0, 5, 2},   {1, 2, 2},    {4, 7, 2},     {4, 7, 3},    {6, 2, 3},
                                 {8, 64, 2},  {5, 257, 2},  {5, 257, 3},   {13, 1000, 3}};

TEST(CrossEntropy, VocabShardsCombineToUnsharded) {
  std::mt19937 rng(44);
  for (auto [n, v, k] : kShardCases) {
    for (float offset : {0.f, 80.f}) {
      SCOPED_TRACE(::testing::Message() << n << "x" << v << " shards " << k << " offset " << offset);
      const auto bounds = shard_bounds(v, k);
      Tensor logits = random_tensor({n, v}, rng, offset - 4.f, offset + 4.f);
      Tensor targets = random_targets(n, v, rng);
      Tensor want_losses = test::nan_tensor({n}), want_lse = test::nan_tensor({n});
      cross_entropy_forward(logits, targets, want_losses, want_lse);
      const float dloss = n ? 1.f / float(n) : 1.f;
      Tensor want_dlogits = test::nan_tensor({n, v});
      cross_entropy_backward(logits, targets, want_lse, dloss, want_dlogits);

      // Forward: each shard's statistics, then what the all-reduces would
      // combine (a max and a sum for the log-sum-exp, a sum for the target logits).
      std::vector<std::vector<float>> shard_lse;
      std::vector<double> target_sum(std::size_t(n), 0.0);
      for (std::int64_t r = 0; r < k; ++r) {
        const VocabShard shard{bounds[std::size_t(r)], v};
        Tensor lse_r = test::nan_tensor({n}), tl_r = test::nan_tensor({n});
        cross_entropy_shard_forward(columns(logits, shard.start, bounds[std::size_t(r) + 1]), targets, shard, lse_r,
                                    tl_r);
        shard_lse.push_back(lse_r.to_vector<float>());
        const auto tl = tl_r.to_vector<float>();
        for (std::size_t i = 0; i < tl.size(); ++i) target_sum[i] += tl[i];
      }
      std::vector<double> lse(static_cast<std::size_t>(n)), losses(static_cast<std::size_t>(n));
      double lse_scale = 0;
      for (std::size_t i = 0; i < lse.size(); ++i) {
        double mx = -INFINITY;
        for (const auto& l : shard_lse) mx = std::max(mx, double(l[i]));
        double sum = 0;
        for (const auto& l : shard_lse) sum += std::exp(double(l[i]) - mx);
        lse[i] = mx + std::log(sum);
        losses[i] = lse[i] - target_sum[i];
        lse_scale = std::max(lse_scale, std::abs(lse[i]));
      }
      EXPECT_TRUE(all_close(want_lse.to_vector<float>(), lse, 1e-6)) << "lse";
      // A loss is lse minus a logit: its f32 error is relative to lse (near
      // the offset), not to the loss (near log V).
      EXPECT_TRUE(all_close(want_losses.to_vector<float>(), losses, 1e-6, 1e-6 * lse_scale)) << "losses";

      // Backward: each shard's columns from the global lse (the unsharded
      // op's, so that only the sharding differs), laid side by side.
      const Tensor& global_lse = want_lse;
      std::vector<double> dlogits(std::size_t(n * v));
      for (std::int64_t r = 0; r < k; ++r) {
        const VocabShard shard{bounds[std::size_t(r)], v};
        const std::int64_t end = bounds[std::size_t(r) + 1], cols = end - shard.start;
        Tensor d_r = columns(logits, shard.start, end);  // in place, as the training step does
        cross_entropy_backward(d_r, targets, global_lse, dloss, d_r, shard);
        const auto d = d_r.to_vector<float>();
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t j = 0; j < cols; ++j)
            dlogits[std::size_t(i * v + shard.start + j)] = d[std::size_t(i * cols + j)];
      }
      EXPECT_TRUE(all_close(want_dlogits.to_vector<float>(), dlogits, 1e-6)) << "dlogits";
    }
  }
}

TEST(CrossEntropy, ShardForwardKnownValues) {
  // Vocabulary 5 in shards [0, 3) and [3, 5); targets 4 (in shard 1) and 1 (in shard 0).
  Tensor logits = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14}, {2, 5});
  Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{4, 1}, {2});
  Tensor lse = Tensor::empty({2}, DType::kF32), tl = Tensor::empty({2}, DType::kF32);
  cross_entropy_shard_forward(columns(logits, 3, 5), targets, {3, 5}, lse, tl);
  EXPECT_FLOAT_EQ(lse.item(0), 4.f + std::log(1.f + std::exp(-1.f)));
  EXPECT_FLOAT_EQ(lse.item(1), 14.f + std::log(1.f + std::exp(-1.f)));
  EXPECT_EQ(tl.to_vector<float>(), (std::vector<float>{4, 0}));
  cross_entropy_shard_forward(columns(logits, 0, 3), targets, {0, 5}, lse, tl);
  EXPECT_EQ(tl.to_vector<float>(), (std::vector<float>{0, 11}));
  // An empty shard: lse -inf (adds nothing to a log-sum-exp), target logit 0.
  cross_entropy_shard_forward(columns(logits, 5, 5), targets, {5, 5}, lse, tl);
  EXPECT_EQ(lse.to_vector<float>(), (std::vector<float>{-INFINITY, -INFINITY}));
  EXPECT_EQ(tl.to_vector<float>(), (std::vector<float>{0, 0}));
  // Unsharded ({0, -1}): the whole row, as cross_entropy_forward.
  Tensor losses = Tensor::empty({2}, DType::kF32), want_lse = Tensor::empty({2}, DType::kF32);
  cross_entropy_forward(logits, targets, losses, want_lse);
  cross_entropy_shard_forward(logits, targets, {}, lse, tl);
  EXPECT_EQ(lse.to_vector<float>(), want_lse.to_vector<float>());
  EXPECT_EQ(tl.to_vector<float>(), (std::vector<float>{4, 11}));
}

TEST(CrossEntropy, ShardedTargetOutOfRangeNamesTheFullVocabulary) {
  // Shard [4, 8) of a vocabulary of 10: target 9 is another shard's, 10 is out.
  Tensor logits = Tensor::zeros({3, 4}, DType::kF32), lse = Tensor::zeros({3}, DType::kF32),
         tl = Tensor::zeros({3}, DType::kF32);
  Tensor ok = Tensor::from_vector(std::vector<std::int32_t>{9, 0, 5}, {3});
  cross_entropy_shard_forward(logits, ok, {4, 10}, lse, tl);
  Tensor big = Tensor::from_vector(std::vector<std::int32_t>{9, 0, 10}, {3});
  EXPECT_TRUE(throws_error([&] { cross_entropy_shard_forward(logits, big, {4, 10}, lse, tl); },
                           ErrorKind::kOutOfRange, {"target 10", "row 2", "[0, 10)"}));
  Tensor neg = Tensor::from_vector(std::vector<std::int32_t>{9, -2, 5}, {3});
  Tensor dlogits = Tensor::zeros({3, 4}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(logits, neg, lse, 1.f, dlogits, {4, 10}); },
                           ErrorKind::kOutOfRange, {"target -2", "row 1", "[0, 10)"}));
}

TEST(CrossEntropy, BadVocabShardThrows) {
  Tensor logits = Tensor::zeros({3, 4}, DType::kF32), lse = Tensor::zeros({3}, DType::kF32),
         tl = Tensor::zeros({3}, DType::kF32), dlogits = Tensor::zeros({3, 4}, DType::kF32);
  Tensor targets = Tensor::zeros({3}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { cross_entropy_shard_forward(logits, targets, {7, 10}, lse, tl); },
                           ErrorKind::kInvalidArgument, {"cross_entropy_shard_forward", "[7, 11)", "[0, 10)"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_shard_forward(logits, targets, {-4, 10}, lse, tl); },
                           ErrorKind::kInvalidArgument, {"[-4, 0)"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(logits, targets, lse, 1.f, dlogits, {2, -1}); },
                           ErrorKind::kInvalidArgument, {"cross_entropy_backward", "start 2", "size -1"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(logits, targets, lse, 1.f, dlogits, {0, 3}); },
                           ErrorKind::kInvalidArgument, {"[0, 4)", "[0, 3)"}));
  Tensor tl2 = Tensor::zeros({2}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { cross_entropy_shard_forward(logits, targets, {0, 4}, lse, tl2); },
                           ErrorKind::kShapeMismatch, {"'target_logit'", "[3]", "[2]"}));
}

// f16 and bf16 logits and dlogits against the f32 op on the same values:
// losses, lse and target_logit stay f32 (within f32 rounding of the f32 op's),
// dlogits in the 16-bit dtype within half_rtol (2e-3 f16, 1e-2 bf16), whole
// and sharded, with dlogits over the logits too.
TEST(CrossEntropy, HalfLogitsMatchF32OnTheSameValuesWithF32Statistics) {
  using test::half_close;
  using test::random_half;
  std::mt19937 rng(60);
  for (DType dt : test::kHalfDtypes)
    for (auto [n, v] : kCases) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << n << "x" << v);
      const Tensor targets = random_targets(n, v, rng);
      const auto logits = random_half({n, v}, dt, rng, -8.f, 8.f);
      Tensor losses16 = test::nan_tensor({n}), lse16 = test::nan_tensor({n});
      Tensor losses32 = test::nan_tensor({n}), lse32 = test::nan_tensor({n});
      cross_entropy_forward(logits.half, targets, losses16, lse16);
      cross_entropy_forward(logits.f32, targets, losses32, lse32);
      EXPECT_TRUE(all_close(losses16.to_vector<float>(), test::to_double(losses32), 1e-6));
      EXPECT_TRUE(all_close(lse16.to_vector<float>(), test::to_double(lse32), 1e-6));

      const float dloss = n ? 1.f / float(n) : 1.f;
      Tensor d16 = test::nan_half({n, v}, dt), d32 = test::nan_tensor({n, v});
      cross_entropy_backward(logits.half, targets, lse16, dloss, d16);
      cross_entropy_backward(logits.f32, targets, lse32, dloss, d32);
      EXPECT_TRUE(half_close(d16, d32, dt));
      Tensor in_place = logits.half.clone();  // dlogits aliasing logits
      cross_entropy_backward(in_place, targets, lse16, dloss, in_place);
      EXPECT_EQ(in_place.to_vector<float>(), d16.to_vector<float>());

      // A shard of the columns: [start, start + cols) of a vocabulary of v + 3.
      const std::int64_t start = v / 3, cols = v - v / 3;
      const VocabShard shard{start, v + 3};
      const Tensor shard_targets = random_targets(n, v + 3, rng);
      const auto part = random_half({n, cols}, dt, rng, -8.f, 8.f);
      Tensor slse16 = test::nan_tensor({n}), tl16 = test::nan_tensor({n});
      Tensor slse32 = test::nan_tensor({n}), tl32 = test::nan_tensor({n});
      cross_entropy_shard_forward(part.half, shard_targets, shard, slse16, tl16);
      cross_entropy_shard_forward(part.f32, shard_targets, shard, slse32, tl32);
      EXPECT_TRUE(all_close(slse16.to_vector<float>(), test::to_double(slse32), 1e-6));
      EXPECT_EQ(tl16.to_vector<float>(), tl32.to_vector<float>());  // a 16-bit logit, exactly
      Tensor sd16 = test::nan_half({n, cols}, dt), sd32 = test::nan_tensor({n, cols});
      cross_entropy_backward(part.half, shard_targets, lse32, dloss, sd16, shard);
      cross_entropy_backward(part.f32, shard_targets, lse32, dloss, sd32, shard);
      EXPECT_TRUE(half_close(sd16, sd32, dt));
    }
}

TEST(CrossEntropy, HalfDtypeErrors) {
  auto t = [](Shape s, DType d) { return Tensor::zeros(s, d); };
  const Tensor targets = t({3}, DType::kI32);
  Tensor losses = t({3}, DType::kF32), lse16 = t({3}, DType::kBF16), lse = t({3}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}, DType::kBF16), targets, losses, lse16); },
                           ErrorKind::kDTypeMismatch, {"'lse' must be f32", "bf16"}));
  Tensor losses16 = t({3}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}, DType::kF16), targets, losses16, lse); },
                           ErrorKind::kDTypeMismatch, {"'losses' must be f32"}));
  Tensor tl16 = t({3}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { cross_entropy_shard_forward(t({3, 10}, DType::kF16), targets, {0, 10}, lse, tl16); },
                           ErrorKind::kDTypeMismatch, {"'target_logit' must be f32"}));
  Tensor dl = t({3, 10}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(t({3, 10}, DType::kBF16), targets, lse, 1.f, dl); },
                           ErrorKind::kDTypeMismatch,
                           {"cross_entropy_backward", "'dlogits' is f16", "'logits' is bf16"}));
}

TEST(CrossEntropy, ShapeAndDtypeErrors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor losses = t({3}), lse = t({3});
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}), t({3}), losses, lse); }, ErrorKind::kDTypeMismatch,
                           {"'targets'", "i32"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}), t({4}, DType::kI32), losses, lse); },
                           ErrorKind::kShapeMismatch, {"'targets'", "[3]", "[4]"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 2, 5}), t({3}, DType::kI32), losses, lse); },
                           ErrorKind::kShapeMismatch, {"'logits'", "2-d"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}, DType::kI32), t({3}, DType::kI32), losses, lse); },
                           ErrorKind::kDTypeMismatch, {"'logits'", "i32"}));
  Tensor losses2 = t({2});
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}), t({3}, DType::kI32), losses2, lse); },
                           ErrorKind::kShapeMismatch, {"'losses'"}));
  Tensor dl = t({3, 9});
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(t({3, 10}), t({3}, DType::kI32), lse, 1.f, dl); },
                           ErrorKind::kShapeMismatch, {"'dlogits'", "[3, 10]"}));
}

}  // namespace
}  // namespace ht::ops::cross_entropy_test
