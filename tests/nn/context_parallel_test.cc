// Context-parallel attention (nn/context_parallel.h): a sequence split over
// 2 and 4 ranks, each holding its load-balanced pair of chunks, gives the
// output and the q, k and v gradients of attention over the whole sequence
// in one process, for those positions, within 1e-5 relative; causal and not,
// grouped-query heads, chunks of a length off every tile; the chunks the
// engine hands a rank hold the positions the models index; and a key mask
// or document ids, which cannot cross the split, are refused.
#include <gtest/gtest.h>

#include <random>

#include "ht/comm/mpi_communicator.h"
#include "ht/data/data_source.h"
#include "ht/nn/attention.h"
#include "ht/nn/context_parallel.h"
#include "ht/nn/functional.h"
#include "ht/nn/self_attention.h"
#include "ht/ops/movement.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::nn {
namespace {

constexpr std::int64_t kBatch = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 6;
constexpr std::int64_t kQ = kHeads * kHeadDim, kKv = kKvHeads * kHeadDim, kWidth = kQ + 2 * kKv;

/// x (B, T, q | k | v) -> attention's output, and its backward from dy: the
/// gradient of x.
struct Result {
  std::vector<float> out, dx;
};
template <typename Attend>
Result run(const Tensor& x, const Tensor& dy, const Attend& attend) {
  Context ctx;
  Tape tape(ctx);
  const Var in = tape.input(x);
  const Var y = attend(narrow(in, 2, 0, kQ), narrow(in, 2, kQ, kKv), narrow(in, 2, kQ + kKv, kKv));
  tape.set_output(y);
  return {y.tensor().to_vector<float>(), tape.backward(ctx, dy).to_vector<float>()};
}

/// This rank's chunks r and 2C - 1 - r of a (B, 2CL, W) tensor, side by side.
Tensor my_chunks(const Tensor& whole, int rank, int ranks, std::int64_t l) {
  Tensor mine = Tensor::empty({whole.size(0), 2 * l, whole.size(2)}, whole.dtype());
  for (int half = 0; half < 2; ++half) {
    Tensor part = Tensor::empty({whole.size(0), l, whole.size(2)}, whole.dtype());
    ops::narrow(whole, 1, (half == 0 ? rank : 2 * ranks - 1 - rank) * l, part);
    ops::narrow_into(part, 1, half * l, mine);
  }
  return mine;
}

double max_relative(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, double(std::abs(got[i] - want[i])));
    scale = std::max(scale, double(std::abs(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

TEST(ContextParallel, EqualsAttentionOverTheWholeSequence) {
  auto world = comm::make_mpi_world();
  const int ranks = world->size(), rank = world->rank();
  for (const bool causal : {true, false})
    for (const std::int64_t l : {std::int64_t(5), std::int64_t(37)}) {
      SCOPED_TRACE(::testing::Message() << "causal " << causal << ", chunks of " << l);
      const std::int64_t t = 2 * ranks * l;
      std::mt19937 rng(21);  // the same whole tensors on every rank
      const Tensor x = test::random_tensor({kBatch, t, kWidth}, rng, -2.f, 2.f);
      const Tensor dy = test::random_tensor({kBatch, t, kQ}, rng);
      const ops::AttentionOptions o{.n_head = int(kHeads), .n_kv_head = int(kKvHeads), .causal = causal};
      const Result whole = run(x, dy, [&](const Var& q, const Var& k, const Var& v) { return attention(q, k, v, o); });
      const Result split = run(my_chunks(x, rank, ranks, l), my_chunks(dy, rank, ranks, l),
                               [&](const Var& q, const Var& k, const Var& v) {
                                 return context_parallel_attention(q, k, v, o, *world);
                               });
      const auto mine = [&](const std::vector<float>& v, std::int64_t width) {
        return my_chunks(Tensor::from_vector(v, {kBatch, t, width}), rank, ranks, l).to_vector<float>();
      };
      EXPECT_LE(max_relative(split.out, mine(whole.out, kQ)), 1e-5) << "output";
      EXPECT_LE(max_relative(split.dx, mine(whole.dx, kWidth)), 1e-5) << "gradients of q, k and v";
      // The comparison sees a chunk's place: another rank's positions differ.
      const std::vector<float> other =
          my_chunks(Tensor::from_vector(whole.out, {kBatch, t, kQ}), (rank + 1) % ranks, ranks, l).to_vector<float>();
      EXPECT_GT(max_relative(split.out, other), 1e-3);
    }
}

// What the engine hands a rank (context_chunks) holds, at each local
// position i, the sequence's position ContextParallel::position(i): the
// index GPT's learned and Llama's rotary positions take. A length that does
// not cut into 2C chunks is refused, naming one that does.
TEST(ContextParallel, ChunksHoldThePositionsTheModelsIndex) {
  auto world = comm::make_mpi_world();
  const ContextParallel cp{.group = world.get()};
  const std::int64_t t = 6 * 2 * cp.size();
  std::vector<std::int32_t> ids(std::size_t(2 * t));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(i);  // row b, position j: b t + j
  const Tensor mine = context_chunks(Tensor::from_vector(ids, {2, t}), cp);
  ASSERT_EQ(mine.shape(), (Shape{2, t / cp.size()}));
  const std::vector<std::int32_t> got = mine.to_vector<std::int32_t>();
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < mine.size(1); ++i)
      EXPECT_EQ(got[std::size_t(b * mine.size(1) + i)], b * t + cp.position(i, mine.size(1))) << "row " << b << ", i " << i;
  // Rank r's halves are chunks r and 2C - 1 - r.
  EXPECT_EQ(cp.position(0, mine.size(1)), std::int64_t(cp.rank()) * 6);
  EXPECT_EQ(cp.position(6, mine.size(1)), std::int64_t(2 * cp.size() - 1 - cp.rank()) * 6);
  EXPECT_TRUE(test::throws_error([&] { context_chunks(Tensor::zeros({2, t + 2}, DType::kI32), cp); },
                                 ErrorKind::kConfig, {"is not a multiple of", "e.g."}));
}

// A key padding mask cannot cross the sequence's split: SelfAttention under
// context parallelism refuses one by name rather than mask only its chunks.
TEST(ContextParallel, SelfAttentionRefusesAKeyMask) {
  auto world = comm::make_mpi_world();
  SelfAttention attn("attn", {.dim = 8, .n_head = 2, .causal = false}, Device::cpu(), {},
                     ContextParallel{.group = world.get()});
  Context ctx;
  ctx.set_side_input("key_mask", Tensor::zeros({1, 4}, DType::kI32));
  const Tensor x = Tensor::zeros({1, 4, 8}, DType::kF32);
  EXPECT_TRUE(test::throws_error([&] { attn.forward(ctx, x); }, ErrorKind::kNotSupported,
                                 {"key padding mask ('key_mask')", "--cp 1"}));
}

// Document ids cannot cross the split either: GPT's and Llama's attention
// refuse them by name under context parallelism.
TEST(ContextParallel, AttentionRefusesDocumentIds) {
  auto world = comm::make_mpi_world();
  const ContextParallel cp{.group = world.get()};
  SelfAttention llama("attn", {.dim = 8, .n_head = 2}, Device::cpu(), {}, cp);
  CausalSelfAttention gpt("attn", 8, 2, Device::cpu(), {}, cp);
  const Tensor x = Tensor::zeros({1, 4, 8}, DType::kF32);
  for (Module* m : {static_cast<Module*>(&llama), static_cast<Module*>(&gpt)}) {
    Context ctx;
    ctx.set_side_input(std::string(data::kDocumentIdsSide), Tensor::zeros({1, 4}, DType::kI32));
    EXPECT_TRUE(test::throws_error([&] { m->forward(ctx, x); }, ErrorKind::kNotSupported,
                                   {"document masking ('document_ids')", "--cp 1"}));
  }
}

}  // namespace
}  // namespace ht::nn
