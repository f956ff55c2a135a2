// Attention across documents in the layers (the side input
// data::kDocumentIdsSide): GPT's CausalSelfAttention and Llama's
// SelfAttention (grouped-query heads, rotary positions) give each document
// of a packed row what a row of that document alone gives (output, input
// gradient, parameter gradients summed over the documents); a document's
// outputs are the same bits whatever the other documents of its row hold;
// one document per row is the same bits as no ids; recomputation (selective
// and full) changes no bits with ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ht/data/data_source.h"
#include "ht/nn/attention.h"
#include "ht/nn/self_attention.h"
#include "test_util.h"

namespace ht::nn::document_mask_test {
namespace {

const std::string kDocs(data::kDocumentIdsSide);

using test::bits;

void randomize(Module& m, std::mt19937& rng, float scale) {
  for (Parameter* p : m.parameters()) p->data().copy_from(test::random_tensor(p->data().shape(), rng, -scale, scale));
}

// The documents of the test rows, as lengths: row 0 two (one across the
// CPU attention's 64-wide tiles), row 1 three. T = 80.
constexpr std::int64_t kT = 80, kC = 16;
const std::vector<std::vector<std::int64_t>> kLengths = {{70, 10}, {7, 50, 23}};

Tensor document_ids() {
  std::vector<std::int32_t> ids;
  for (const auto& row : kLengths)
    for (std::size_t d = 0; d < row.size(); ++d) ids.insert(ids.end(), std::size_t(row[d]), std::int32_t(d));
  return Tensor::from_vector(ids, {std::int64_t(kLengths.size()), kT});
}

/// Rows [from, from + n) of batch entry b of x (B, T, C), as (1, n, C).
Tensor piece(const Tensor& x, std::int64_t b, std::int64_t from, std::int64_t n) {
  const std::vector<float> all = x.to_vector<float>();
  const auto at = all.begin() + (b * x.size(1) + from) * x.size(2);
  return Tensor::from_vector(std::vector<float>(at, at + n * x.size(2)), {1, n, x.size(2)});
}

struct Result {
  Tensor y, dx;
  std::vector<Tensor> grads;
};

/// One forward and backward in a saving context with `docs` as the side
/// input (none: null); `zero` clears the parameter gradients first.
Result run(Module& m, const Tensor& x, const Tensor& dy, const Tensor* docs, bool zero = true) {
  Context ctx;
  if (docs) ctx.set_side_input(kDocs, *docs);
  if (zero) m.zero_grad();
  Result r;
  r.y = m.forward(ctx, x);
  r.dx = m.backward(ctx, dy);
  for (Parameter* p : m.parameters()) r.grads.push_back(p->grad().clone());
  return r;
}

// Each document of the packed rows against a run on it alone (a row of its
// own length, positions from 0; parameter gradients accumulated over the
// documents' runs): within f32 rounding, the tiles falling elsewhere.
void expect_documents_alone(Module& m, double rtol) {
  std::mt19937 rng(5);
  randomize(m, rng, 0.4f);
  const Tensor x = test::random_tensor({2, kT, kC}, rng), dy = test::random_tensor({2, kT, kC}, rng);
  const Tensor ids = document_ids();
  const Result packed = run(m, x, dy, &ids);
  m.zero_grad();
  Result alone;
  for (std::int64_t b = 0; b < 2; ++b) {
    std::int64_t from = 0;
    for (std::int64_t n : kLengths[std::size_t(b)]) {
      SCOPED_TRACE(::testing::Message() << "row " << b << ", document at " << from << " of " << n);
      alone = run(m, piece(x, b, from, n), piece(dy, b, from, n), nullptr, /*zero=*/false);
      EXPECT_TRUE(test::all_close(piece(packed.y, b, from, n).to_vector<float>(), test::to_double(alone.y), rtol));
      EXPECT_TRUE(test::all_close(piece(packed.dx, b, from, n).to_vector<float>(), test::to_double(alone.dx), rtol));
      from += n;
    }
  }
  // The key projection's bias has a gradient of zero in exact arithmetic
  // (it shifts a query's scores alike): rounding noise, so the absolute
  // scale is the largest gradient of the layer.
  double scale = 0;
  for (const Tensor& g : alone.grads)
    for (float v : g.to_vector<float>()) scale = std::max(scale, double(std::abs(v)));
  for (std::size_t i = 0; i < packed.grads.size(); ++i)
    EXPECT_TRUE(
        test::all_close(packed.grads[i].to_vector<float>(), test::to_double(alone.grads[i]), rtol, rtol * scale))
        << m.parameters()[i]->name();
  // Without the ids the later documents see the earlier ones.
  EXPECT_NE(bits(run(m, x, dy, nullptr).y), bits(packed.y));
}

// Exactly checkable: a document's outputs and input gradients do not depend
// on what the rest of its row holds, bit for bit (other documents' inputs
// redrawn); and one id for the whole row is the same bits as no ids.
void expect_documents_isolated(Module& m) {
  std::mt19937 rng(6);
  randomize(m, rng, 0.4f);
  const Tensor x = test::random_tensor({2, kT, kC}, rng), dy = test::random_tensor({2, kT, kC}, rng);
  const Tensor ids = document_ids();
  const Result first = run(m, x, dy, &ids);
  // Redraw every position outside row 0's second document and row 1's
  // second, keeping those two.
  Tensor other = test::random_tensor({2, kT, kC}, rng);
  const std::vector<float> xs = x.to_vector<float>();
  for (const auto& [b, from, n] : {std::tuple{0, 70, 10}, std::tuple{1, 7, 50}})
    for (std::int64_t i = (b * kT + from) * kC; i < (b * kT + from + n) * kC; ++i)
      other.data<float>()[i] = xs[std::size_t(i)];
  const Result second = run(m, other, dy, &ids);
  for (const auto& [b, from, n] : {std::tuple{0, 70, 10}, std::tuple{1, 7, 50}}) {
    EXPECT_EQ(bits(piece(second.y, b, from, n)), bits(piece(first.y, b, from, n))) << "row " << b;
    EXPECT_EQ(bits(piece(second.dx, b, from, n)), bits(piece(first.dx, b, from, n))) << "row " << b;
  }
  const Tensor one = Tensor::zeros({2, kT}, DType::kI32);
  const Result with_one = run(m, x, dy, &one), without = run(m, x, dy, nullptr);
  EXPECT_EQ(bits(with_one.y), bits(without.y));
  EXPECT_EQ(bits(with_one.dx), bits(without.dx));
  for (std::size_t i = 0; i < without.grads.size(); ++i) EXPECT_EQ(bits(with_one.grads[i]), bits(without.grads[i]));
}

// None, selective and full recomputation: the same bits with ids (the full
// re-run reads them from the fresh context, the selective one from what
// forward kept).
void expect_recompute_same_bits(Module& m) {
  std::mt19937 rng(7);
  randomize(m, rng, 0.4f);
  const Tensor x = test::random_tensor({2, kT, kC}, rng), dy = test::random_tensor({2, kT, kC}, rng);
  const Tensor ids = document_ids();
  m.set_recompute(Recompute::kNone);
  const Result none = run(m, x, dy, &ids);
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    m.set_recompute(mode);
    const Result r = run(m, x, dy, &ids);
    EXPECT_EQ(bits(r.y), bits(none.y)) << recompute_name(mode);
    EXPECT_EQ(bits(r.dx), bits(none.dx)) << recompute_name(mode);
    for (std::size_t i = 0; i < none.grads.size(); ++i)
      EXPECT_EQ(bits(r.grads[i]), bits(none.grads[i])) << recompute_name(mode) << " grad " << i;
  }
  m.set_recompute(Recompute::kNone);
}

TEST(DocumentMask, GptAttentionDocumentsEqualTheirOwnRows) {
  CausalSelfAttention attn("attn", kC, 2, Device::cpu());
  expect_documents_alone(attn, 2e-5);
}

TEST(DocumentMask, GroupedQueryAttentionDocumentsEqualTheirOwnRows) {
  SelfAttention attn("attn", {.dim = kC, .n_head = 4, .n_kv_head = 2, .causal = true, .bias = true}, Device::cpu());
  expect_documents_alone(attn, 2e-5);
}

// Rotary positions are not reset per document: a later document's positions
// are those of the row. Its scores depend only on distances, so it equals a
// row of it alone up to the rounding of the angles (larger at later positions).
TEST(DocumentMask, RotaryAttentionDocumentsEqualTheirOwnRowsUpToAngles) {
  SelfAttention attn("attn",
                     {.dim = kC, .n_head = 4, .n_kv_head = 1, .causal = true, .rope_theta = 10000.f,
                      .max_positions = kT},
                     Device::cpu());
  expect_documents_alone(attn, 1e-4);
}

TEST(DocumentMask, DocumentsAreIsolatedBitForBit) {
  CausalSelfAttention gpt("attn", kC, 2, Device::cpu());
  expect_documents_isolated(gpt);
  SelfAttention llama("attn",
                      {.dim = kC, .n_head = 4, .n_kv_head = 2, .causal = true, .rope_theta = 10000.f,
                       .max_positions = kT},
                      Device::cpu());
  expect_documents_isolated(llama);
}

TEST(DocumentMask, RecomputationChangesNoBits) {
  CausalSelfAttention gpt("attn", kC, 2, Device::cpu());
  expect_recompute_same_bits(gpt);
  SelfAttention llama("attn",
                      {.dim = kC, .n_head = 4, .n_kv_head = 2, .causal = true, .rope_theta = 10000.f,
                       .max_positions = kT},
                      Device::cpu());
  expect_recompute_same_bits(llama);
}

// A layer configured to read no document ids ignores the side input; one
// reading another name reads that one.
TEST(DocumentMask, SelfAttentionReadsTheNamedSideInput) {
  std::mt19937 rng(8);
  const Tensor x = test::random_tensor({2, kT, kC}, rng), dy = test::random_tensor({2, kT, kC}, rng);
  const Tensor ids = document_ids();
  SelfAttention plain("attn", {.dim = kC, .n_head = 2}, Device::cpu());
  randomize(plain, rng, 0.4f);
  const Result masked = run(plain, x, dy, &ids), unmasked = run(plain, x, dy, nullptr);
  SelfAttention deaf("attn", {.dim = kC, .n_head = 2, .document_ids = ""}, Device::cpu());
  SelfAttention renamed("attn", {.dim = kC, .n_head = 2, .document_ids = "segments"}, Device::cpu());
  for (SelfAttention* m : {&deaf, &renamed})
    for (std::size_t i = 0; i < plain.parameters().size(); ++i)
      m->parameters()[i]->data().copy_from(plain.parameters()[i]->data());
  EXPECT_EQ(bits(run(deaf, x, dy, &ids).y), bits(unmasked.y));
  EXPECT_EQ(bits(run(renamed, x, dy, &ids).y), bits(unmasked.y));  // "document_ids" is not its name
  Context ctx;
  ctx.set_side_input("segments", ids);
  EXPECT_EQ(bits(renamed.forward(ctx, x)), bits(masked.y));
}

}  // namespace
}  // namespace ht::nn::document_mask_test
