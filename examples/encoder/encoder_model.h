// A transformer encoder classifier of padded sequences, written forward-only
// as a user of the library would write it (about 60 lines), and the data it
// learns from: sequences of random length, padded, each labelled with the
// class whose marker token it holds most often. The model reads the padding
// mask the data gives with each micro-batch ("key_mask"): attention skips
// padded keys and the pooling averages real tokens only.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ht/core/rng.h"
#include "ht/data/data_source.h"
#include "ht/nn/embedding.h"
#include "ht/nn/encoder_block.h"
#include "ht/nn/functional.h"
#include "ht/nn/linear.h"
#include "ht/nn/model.h"
#include "ht/ops/cast.h"
#include "ht/parallel/tables.h"

namespace ht::examples {

struct EncoderConfig {
  std::int64_t vocab = 32, seq_len = 32, dim = 64, classes = 4;
  int heads = 4, layers = 4;
  float dropout = 0.1f;
};

// ---- the model ----------------------------------------------------------------

class Encoder : public nn::Model {
 public:
  Encoder(const EncoderConfig& c, const nn::Placement& at) : Model("encoder", at), c_(c) {
    const auto [first, last] = parallel::stage_range(c.layers, at.stage.rank, at.stage.size, at.stage.boundaries);
    if (first_stage()) embed_ = &add_built(std::make_unique<nn::Embedding>("embed", c.vocab, c.seq_len, c.dim, at.device));
    for (int l = first; l < last; ++l)
      blocks_.push_back(&add_built(std::make_unique<nn::EncoderBlock>(
          fmt::format("h.{}", l), nn::EncoderBlockConfig{.dim = c.dim, .n_head = c.heads, .dropout = c.dropout},
          at.device, at.tp)));
    if (last_stage()) {
      norm_ = &add_built(std::make_unique<nn::LayerNorm>("ln_f", c.dim, at.device));
      head_ = &add_built(std::make_unique<nn::Linear>("head", c.dim, c.classes, true, at.device));
    }
  }

  nn::Var compute(const nn::Var& x) override {
    nn::Var h = embed_ ? (*embed_)(x) : x;
    for (nn::EncoderBlock* block : blocks_) h = (*block)(h);
    if (!last_stage()) return h;
    return (*head_)(nn::masked_mean((*norm_)(h), x.tape().side_input("key_mask")));
  }
  nn::Loss loss(const nn::Var& logits, const Tensor& labels) override { return nn::cross_entropy(logits, labels); }

  std::vector<std::string> metric_names() const override { return {"accuracy"}; }
  void add_metrics(nn::Context& ctx, const Tensor& logits, const Tensor& labels) const override {
    Tensor f32 = Tensor::empty(logits.shape(), DType::kF32, logits.device());
    ops::cast(logits, f32);
    const std::vector<float> l = f32.to_vector<float>();
    const std::vector<std::int32_t> y = labels.to_vector<std::int32_t>();
    double correct = 0;
    for (std::size_t r = 0; r < y.size(); ++r) {
      const auto row = l.begin() + std::ptrdiff_t(r) * c_.classes;
      correct += std::max_element(row, row + c_.classes) - row == y[r];
    }
    ctx.add_metric("accuracy", correct);
  }

  Shape stage_input_shape(const Shape& input) const override { return {input[0], input[1], c_.dim}; }
  int num_layers() const override { return c_.layers; }
  std::string describe() const override {
    return fmt::format("Encoder L{} H{} C{} V{} T{} K{}", c_.layers, c_.heads, c_.dim, c_.vocab, c_.seq_len, c_.classes);
  }

 private:
  EncoderConfig c_;
  nn::Embedding* embed_ = nullptr;  // first stage
  std::vector<nn::EncoderBlock*> blocks_;
  nn::LayerNorm* norm_ = nullptr;  // last stage
  nn::Linear* head_ = nullptr;
};

// ---- the data -----------------------------------------------------------------

/// Sample i (a function of the seed and i alone, so every layout reads the
/// same rows): a sequence of 4..seq_len tokens in [1, vocab), padded with 0,
/// leaning towards one class's marker token (1 + class); its label is the
/// class whose marker it holds most often (the smallest on a tie).
class PaddedSequences : public data::DataSource {
 public:
  explicit PaddedSequences(const EncoderConfig& c) : c_(c) {}
  void attach(const data::DataShard& shard) override { seed_ = shard.seed; }
  data::MicroBatch samples(std::int64_t first, std::int64_t count) override { return make(first, count, 0x7a1aull); }
  bool has_validation() const override { return true; }
  data::MicroBatch validation_samples(std::int64_t first, std::int64_t count) override {
    return make(first, count, 0x7e57ull);
  }

 private:
  data::MicroBatch make(std::int64_t first, std::int64_t count, std::uint64_t stream) const {
    const std::int64_t t = c_.seq_len;
    std::vector<std::int32_t> tokens(std::size_t(count * t), 0), mask(std::size_t(count * t), 0), labels;
    for (std::int64_t r = 0; r < count; ++r) {
      Rng rng;
      rng.set_state(seed_ ^ stream, std::uint64_t(first + r) << 20);  // 2^20 draws per sample, apart
      const std::int64_t len = 4 + std::int64_t(rng.below(std::uint64_t(t - 3)));
      const std::int32_t lean = std::int32_t(1 + rng.below(std::uint64_t(c_.classes)));
      std::vector<int> counts(std::size_t(c_.classes), 0);
      for (std::int64_t p = 0; p < len; ++p) {
        const std::int32_t tok =
            rng.uniform() < 0.25f ? lean : std::int32_t(1 + rng.below(std::uint64_t(c_.vocab - 1)));
        tokens[std::size_t(r * t + p)] = tok;
        mask[std::size_t(r * t + p)] = 1;
        if (tok <= c_.classes) ++counts[std::size_t(tok - 1)];
      }
      labels.push_back(std::int32_t(std::max_element(counts.begin(), counts.end()) - counts.begin()));
    }
    data::MicroBatch b{.input = Tensor::from_vector(tokens, {count, t}), .target = Tensor::from_vector(labels, {count})};
    b.side["key_mask"] = Tensor::from_vector(mask, {count, t});
    return b;
  }

  EncoderConfig c_;
  std::uint64_t seed_ = 0;
};

}  // namespace ht::examples
