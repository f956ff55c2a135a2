// Attention masked across documents, end to end: token shards whose
// documents end in an end-of-text id, read by data::ShardBatches with
// document_ids, feeding GPT and Llama directly and through train::Engine.
//
// What is exactly checkable, and checked bit for bit: a document's logits do
// not depend on what the rest of its row holds (the other documents' tokens
// redrawn); with the ids but no document boundary in the data, training and
// evaluation are the same bits as without them (so with the ids off nothing
// changed); recomputation changes no bits with them. Positions are not
// reset per document (a document later in a row sits at later positions),
// so a document's logits equal those of a row it starts only up to rounding,
// and only with rotary positions, which see distances alone (Llama: checked
// within 1e-4); GPT's learned positions make them differ. The engine's
// validation loss equals the model's loss on the same windows with the ids
// as a side input, and differs from the loss without them.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ht/data/shard_batches.h"
#include "ht/data/token_shard.h"
#include "lm_engine.h"
#include "test_util.h"

namespace ht {
namespace {

constexpr std::int32_t kVocab = 64, kEot = 63;
constexpr std::int64_t kSeqLen = 32;
const std::string kDocs(data::kDocumentIdsSide);

using test::bits;

/// Documents of 3 to 14 tokens (ids below 62), each ended by kEot, or with
/// `boundaries` false by id 62 (no document ever ends).
std::vector<std::int32_t> corpus(std::uint32_t seed, bool boundaries) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> length(3, 14), id(0, 61);
  std::vector<std::int32_t> t;
  while (t.size() < 4000) {
    for (int k = length(rng); k > 0; --k) t.push_back(id(rng));
    t.push_back(boundaries ? kEot : 62);
  }
  return t;
}

/// A training and a validation shard in `dir`, and ShardBatches on them.
struct Shards {
  Shards(const std::string& name, bool boundaries) : dir(name) {
    data::write_token_shard(dir / "train.bin", corpus(1, boundaries));
    data::write_token_shard(dir / "val.bin", corpus(2, boundaries));
  }
  data::ShardBatches batches(bool document_ids) const {
    return data::ShardBatches(dir / "train.bin", dir / "val.bin",
                              {.seq_len = kSeqLen, .eot_token = kEot, .document_ids = document_ids,
                               .vocab_size = kVocab});
  }
  test::TempDir dir;
};

models::GPTConfig gpt_config() {
  return {.vocab_size = kVocab, .context = kSeqLen, .n_layer = 2, .n_head = 2, .n_embd = 32};
}
models::LlamaConfig llama_config() {
  return {.vocab_size = kVocab, .context = kSeqLen, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 32,
          .ffn_hidden = 48};
}

template <typename Config>
train::EngineOptions engine_options(const Config&) {
  train::EngineOptions o;
  o.layout.micro_batch = 4;
  o.layout.grad_accum = 2;
  o.steps = 3;
  o.warmup_steps = 1;
  o.lr = 3e-3f;
  o.eval_samples = 8;
  return o;
}

/// Logits (B, T, V) of `model` on `tokens`, with `docs` as the side input (null: none).
template <typename Model>
Tensor logits(Model& model, const Tensor& tokens, const Tensor* docs) {
  nn::Context ctx(Device::cpu(), /*save_for_backward=*/false);
  if (docs) ctx.set_side_input(kDocs, *docs);
  return model.forward(ctx, tokens);
}

/// Positions [from, from + n) of row b of a (B, T, V) tensor, as a flat vector.
std::vector<float> positions(const Tensor& x, std::int64_t b, std::int64_t from, std::int64_t n) {
  const std::vector<float> all = x.to_vector<float>();
  const auto at = all.begin() + (b * x.size(1) + from) * x.size(2);
  return {at, at + n * x.size(2)};
}

/// The [start, length) of each row's documents, from its ids.
std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> documents(const Tensor& ids) {
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> rows(std::size_t(ids.size(0)));
  const std::vector<std::int32_t> v = ids.to_vector<std::int32_t>();
  const std::int64_t t = ids.size(1);
  for (std::int64_t b = 0; b < ids.size(0); ++b)
    for (std::int64_t i = 0; i < t; ++i)
      if (i == 0 || v[std::size_t(b * t + i)] != v[std::size_t(b * t + i - 1)])
        rows[std::size_t(b)].push_back({i, 1});
      else
        ++rows[std::size_t(b)].back().second;
  return rows;
}

// A document's logits are the same bits whatever the rest of its row holds:
// in every validation row, each document in turn is kept and every other
// token redrawn (the ids stay: the end-of-text positions are kept too).
// Without the ids the later documents' logits change.
template <typename Model, typename Config>
void expect_documents_isolated(const Config& config) {
  const Shards shards("ht_document_attention_isolated", true);
  data::ShardBatches source = shards.batches(true);
  source.attach({.seed = 3});
  const data::MicroBatch batch = source.validation_samples(0, 4);
  const Tensor& ids = batch.side.at(kDocs);
  Model model(config);
  model.init_weights(7);
  const Tensor packed = logits(model, batch.input, &ids);
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> id(0, 61);
  int checked = 0, later = 0;
  const auto docs = documents(ids);
  const Tensor unmasked = logits(model, batch.input, nullptr);
  for (std::int64_t b = 0; b < 4; ++b)
    for (const auto& [from, n] : docs[std::size_t(b)]) {
      Tensor other = batch.input.clone();
      std::int32_t* t = other.data<std::int32_t>() + b * kSeqLen;
      for (std::int64_t i = 0; i < kSeqLen; ++i)
        if ((i < from || i >= from + n) && t[i] != kEot) t[i] = id(rng);
      EXPECT_EQ(bits(positions(logits(model, other, &ids), b, from, n)), bits(positions(packed, b, from, n)))
          << "row " << b << ", document at " << from;
      ++checked;
      if (from > 0) {
        ++later;
        EXPECT_NE(positions(logits(model, other, nullptr), b, from, n), positions(unmasked, b, from, n))
            << "without the ids, row " << b << "'s document at " << from << " should see the rest of its row";
      }
    }
  EXPECT_GE(later, 4) << "the windows should hold documents past their first position";
  std::printf("%d documents checked, %d not at the start of their row\n", checked, later);
}

TEST(DocumentAttention, GptDocumentsIgnoreTheRestOfTheirRow) {
  expect_documents_isolated<models::GPT>(gpt_config());
}
TEST(DocumentAttention, LlamaDocumentsIgnoreTheRestOfTheirRow) {
  expect_documents_isolated<models::Llama>(llama_config());
}

// Positions are not reset per document. With rotary positions a document
// later in its row gives the logits of a row it starts (filled with other
// tokens after it, another document) up to the rounding of the angles; with
// GPT's learned positions it does not.
TEST(DocumentAttention, PositionsStayThoseOfTheRow) {
  const Shards shards("ht_document_attention_positions", true);
  data::ShardBatches source = shards.batches(true);
  source.attach({.seed = 3});
  const data::MicroBatch batch = source.validation_samples(0, 4);
  const Tensor& ids = batch.side.at(kDocs);
  models::Llama llama(llama_config());
  llama.init_weights(7);
  models::GPT gpt(gpt_config());
  gpt.init_weights(7);
  const Tensor llama_packed = logits(llama, batch.input, &ids), gpt_packed = logits(gpt, batch.input, &ids);
  int compared = 0;
  const auto docs = documents(ids);
  for (std::int64_t b = 0; b < 4; ++b)
    for (const auto& [from, n] : docs[std::size_t(b)]) {
      if (from == 0) continue;
      // The document at position 0 of a row of its own, then filler.
      std::vector<std::int32_t> tokens(kSeqLen, 5), own(kSeqLen, 1);
      for (std::int64_t i = 0; i < n; ++i) {
        tokens[std::size_t(i)] = batch.input.data<std::int32_t>()[b * kSeqLen + from + i];
        own[std::size_t(i)] = 0;
      }
      const Tensor row = Tensor::from_vector(tokens, {1, kSeqLen}), row_ids = Tensor::from_vector(own, {1, kSeqLen});
      EXPECT_TRUE(test::all_close(positions(logits(llama, row, &row_ids), 0, 0, n),
                                  test::to_double(positions(llama_packed, b, from, n)), 1e-4))
          << "Llama, row " << b << ", document at " << from;
      EXPECT_NE(positions(logits(gpt, row, &row_ids), 0, 0, n), positions(gpt_packed, b, from, n))
          << "GPT, row " << b << ", document at " << from;
      ++compared;
    }
  EXPECT_GE(compared, 4);
}

// ---- the engine ------------------------------------------------------------

struct EngineRun {
  std::vector<std::uint32_t> losses;
  std::uint32_t eval_loss = 0;
  std::vector<std::uint32_t> weights;
};

template <typename Model, typename Config>
EngineRun train_on(const Config& config, data::ShardBatches& source, nn::Recompute recompute = nn::Recompute::kNone) {
  train::EngineOptions o = engine_options(config);
  o.recompute = recompute;
  train::Engine engine(
      o, [config](const nn::Placement& at) { return std::make_unique<Model>(config, at); }, source);
  EngineRun r;
  r.eval_loss = std::bit_cast<std::uint32_t>(float(engine.evaluate().loss));
  for (int i = 0; i < 3; ++i) r.losses.push_back(std::bit_cast<std::uint32_t>(engine.step().loss));
  for (const auto& [name, w] : engine.full_parameters())
    for (std::uint32_t v : bits(w)) r.weights.push_back(v);
  return r;
}

// With the ids on but no end-of-text id in the data, every row is one
// document: the same bits as with the ids off, training and evaluation.
template <typename Model, typename Config>
void expect_no_boundary_same_bits(const Config& config) {
  const Shards shards("ht_document_attention_no_boundary", false);
  data::ShardBatches off = shards.batches(false), on = shards.batches(true);
  const EngineRun without = train_on<Model>(config, off), with = train_on<Model>(config, on);
  EXPECT_EQ(with.eval_loss, without.eval_loss);
  EXPECT_EQ(with.losses, without.losses);
  EXPECT_EQ(with.weights, without.weights);
}

TEST(DocumentAttention, GptWithoutBoundariesChangesNoBits) {
  expect_no_boundary_same_bits<models::GPT>(gpt_config());
}
TEST(DocumentAttention, LlamaWithoutBoundariesChangesNoBits) {
  expect_no_boundary_same_bits<models::Llama>(llama_config());
}

// The engine gives the ids to the model: its validation loss is the model's
// loss on the same windows with them (the same initial weights), not the
// loss without them; training with them differs from training without; and
// selective and full recomputation give the same bits as none.
template <typename Model, typename Config>
void expect_engine_reads_the_ids(const Config& config) {
  const Shards shards("ht_document_attention_engine", true);
  data::ShardBatches on = shards.batches(true), off = shards.batches(false);
  const EngineRun with = train_on<Model>(config, on), without = train_on<Model>(config, off);
  EXPECT_NE(with.eval_loss, without.eval_loss);
  EXPECT_NE(with.losses, without.losses);

  // The validation windows by hand, with the weights of an engine trained
  // a few steps at a high rate (attention sharper than at initialisation,
  // where it is nearly uniform and masking moves the loss little).
  train::EngineOptions o = engine_options(config);
  o.steps = 6;
  o.lr = 1e-2f;
  data::ShardBatches source = shards.batches(true);
  train::Engine engine(
      o, [config](const nn::Placement& at) { return std::make_unique<Model>(config, at); }, source);
  for (int i = 0; i < o.steps; ++i) engine.step();
  const double engine_loss = engine.evaluate().loss;
  Model model(config);
  const std::map<std::string, Tensor> weights = engine.full_parameters();
  for (nn::Parameter* p : model.parameters()) p->data().copy_from(weights.at(p->name()));
  const data::MicroBatch batch = source.validation_samples(0, o.eval_samples);
  nn::Context ctx(Device::cpu(), /*save_for_backward=*/false);
  ctx.set_side_input(kDocs, batch.side.at(kDocs));
  const double by_hand = model.forward_loss(ctx, batch.input, batch.target).value;
  nn::Context plain(Device::cpu(), false);
  const double unmasked = model.forward_loss(plain, batch.input, batch.target).value;
  std::printf("validation loss %.7f (engine), %.7f (by hand, with the ids), %.7f (without)\n", engine_loss, by_hand,
              unmasked);
  EXPECT_NEAR(engine_loss, by_hand, 1e-6 * by_hand);
  EXPECT_GT(std::abs(unmasked - by_hand), 1e-4 * by_hand);

  for (nn::Recompute mode : {nn::Recompute::kSelective, nn::Recompute::kFull}) {
    data::ShardBatches again = shards.batches(true);
    const EngineRun r = train_on<Model>(config, again, mode);
    EXPECT_EQ(r.losses, with.losses) << nn::recompute_name(mode);
    EXPECT_EQ(r.weights, with.weights) << nn::recompute_name(mode);
  }
}

TEST(DocumentAttention, GptEngineReadsTheIds) { expect_engine_reads_the_ids<models::GPT>(gpt_config()); }
TEST(DocumentAttention, LlamaEngineReadsTheIds) { expect_engine_reads_the_ids<models::Llama>(llama_config()); }

}  // namespace
}  // namespace ht
