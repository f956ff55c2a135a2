// An encoder-decoder transformer, written forward-only as a user of the
// library would write it, and the generated task it learns: translating a
// source sequence of random length into its mapped reversal. The decoder's
// blocks read the encoder's memory through cross-attention; the model splits
// into pipeline stages anywhere among its layers (two tensors pass between
// stages: the source and target states in the encoder's part, the target
// state and the memory in the decoder's); its loss is token-normalised over
// the variable-length targets, and it reports token accuracy.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ht/core/rng.h"
#include "ht/data/data_source.h"
#include "ht/nn/decoder_block.h"
#include "ht/nn/embedding.h"
#include "ht/nn/encoder_block.h"
#include "ht/nn/functional.h"
#include "ht/nn/model.h"
#include "ht/ops/cast.h"
#include "ht/parallel/tables.h"

namespace ht::examples {

struct Seq2SeqConfig {
  std::int64_t vocab = 24, src_len = 12, dim = 64;  // target length src_len + 1 (the end token)
  int heads = 4, enc_layers = 2, dec_layers = 2;
  std::int64_t tgt_len() const { return src_len + 1; }
};

constexpr std::int32_t kPad = 0, kBoundary = 1;  // token ids; the target's padding is kIgnore
constexpr std::int32_t kIgnore = -100;

// ---- the model (input: the source then the decoder's input, (B, S + T)) ---------

class Seq2Seq : public nn::Model {
 public:
  Seq2Seq(const Seq2SeqConfig& c, const nn::Placement& at) : Model("seq2seq", at), c_(c) {
    std::tie(first_, last_) = parallel::stage_range(num_layers(), at.stage.rank, at.stage.size, at.stage.boundaries);
    if (first_stage()) {
      src_embed_ = &add_built(std::make_unique<nn::Embedding>("src_embed", c.vocab, c.src_len, c.dim, at.device));
      tgt_embed_ = &add_built(std::make_unique<nn::Embedding>("tgt_embed", c.vocab, c.tgt_len(), c.dim, at.device));
    }
    for (int l = first_; l < last_; ++l) {
      if (l == c.enc_layers) enc_norm_ = &add_built(std::make_unique<nn::LayerNorm>("enc_norm", c.dim, at.device));
      if (l < c.enc_layers)
        enc_.push_back(&add_built(std::make_unique<nn::EncoderBlock>(
            fmt::format("enc.{}", l), nn::EncoderBlockConfig{.dim = c.dim, .n_head = c.heads, .key_mask = "memory_mask"},
            at.device, at.tp)));
      else
        dec_.push_back(&add_built(std::make_unique<nn::DecoderBlock>(
            fmt::format("dec.{}", l - c.enc_layers), nn::DecoderBlockConfig{.dim = c.dim, .n_head = c.heads},
            at.device, at.tp)));
    }
    if (last_stage()) {
      norm_ = &add_built(std::make_unique<nn::LayerNorm>("ln_f", c.dim, at.device));
      head_ = &add_built(std::make_unique<nn::Linear>("head", c.dim, c.vocab, true, at.device));
    }
  }

  nn::Var compute(const nn::Var& x) override { return compute_with(x, {}); }
  // (a, b): (source, target) states in the encoder's layers, (target, memory) in the decoder's.
  nn::Var compute_with(const nn::Var& x, const std::vector<nn::Var>& more) override {
    nn::Var a = first_stage() ? (*src_embed_)(nn::narrow(x, 1, 0, c_.src_len)) : x;
    nn::Var b = first_stage() ? (*tgt_embed_)(nn::narrow(x, 1, c_.src_len, c_.tgt_len())) : more.at(0);
    for (int l = first_; l < last_; ++l) {
      if (l < c_.enc_layers) {
        a = (*enc_[std::size_t(l - first_)])(a);
        continue;
      }
      if (l == c_.enc_layers) std::tie(a, b) = std::pair{b, (*enc_norm_)(a)};
      a = (*dec_[std::size_t(l - std::max(first_, c_.enc_layers))])(a, {b});
    }
    if (last_stage()) return (*head_)((*norm_)(a));
    x.tape().add_output(b);
    return a;
  }
  nn::Loss loss(const nn::Var& logits, const Tensor& target) override {
    return nn::token_cross_entropy(logits, target, {.ignore_index = kIgnore});
  }
  std::vector<std::string> metric_names() const override { return {"token_accuracy"}; }
  void add_metrics(nn::Context& ctx, const Tensor& logits, const Tensor& target) const override;

  std::vector<nn::StageTensor> stage_inputs(const Shape& input) const override {
    const Shape src{input[0], c_.src_len, c_.dim}, tgt{input[0], c_.tgt_len(), c_.dim};
    if (first_ <= c_.enc_layers) return {{"source", src}, {"target", tgt}};
    return {{"target", tgt}, {"memory", src}};
  }
  int num_layers() const override { return c_.enc_layers + c_.dec_layers; }
  std::string describe() const override {
    return fmt::format("Seq2Seq E{} D{} H{} C{} V{} S{}", c_.enc_layers, c_.dec_layers, c_.heads, c_.dim, c_.vocab,
                       c_.src_len);
  }

 private:
  Seq2SeqConfig c_;
  int first_ = 0, last_ = 0;  // this stage's layers
  nn::Embedding *src_embed_ = nullptr, *tgt_embed_ = nullptr;
  std::vector<nn::EncoderBlock*> enc_;
  nn::LayerNorm* enc_norm_ = nullptr;
  std::vector<nn::DecoderBlock*> dec_;
  nn::LayerNorm* norm_ = nullptr;
  nn::Linear* head_ = nullptr;
};

// ---- the metric and the data ------------------------------------------------------

/// Tokens whose most likely id is the target, over the tokens not ignored.
inline void Seq2Seq::add_metrics(nn::Context& ctx, const Tensor& logits, const Tensor& target) const {
  Tensor f32 = Tensor::empty(logits.shape(), DType::kF32, logits.device());
  ops::cast(logits, f32);
  const std::vector<float> l = f32.to_vector<float>();
  const std::vector<std::int32_t> y = target.to_vector<std::int32_t>();
  double correct = 0, counted = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (y[i] == kIgnore) continue;
    const auto row = l.begin() + std::ptrdiff_t(i) * c_.vocab;
    correct += std::max_element(row, row + c_.vocab) - row == y[i];
    ++counted;
  }
  ctx.add_metric("token_accuracy", correct, counted);
}

/// Sample i (a function of the seed and i alone): a source of 2..src_len
/// tokens in [2, vocab), padded with 0; its translation is the source
/// reversed, each token t mapped to 2 + (3 (t - 2) + 1) mod (vocab - 2), then
/// the end token. The decoder reads the boundary token then the translation
/// shifted right; the target is the translation, padding ignored.
class Reversals : public data::DataSource {
 public:
  explicit Reversals(const Seq2SeqConfig& c) : c_(c) {}
  void attach(const data::DataShard& shard) override { seed_ = shard.seed; }
  data::MicroBatch samples(std::int64_t first, std::int64_t count) override { return make(first, count, 0x5e9ull); }
  bool has_validation() const override { return true; }
  data::MicroBatch validation_samples(std::int64_t first, std::int64_t count) override {
    return make(first, count, 0x7e57ull);
  }

 private:
  data::MicroBatch make(std::int64_t first, std::int64_t count, std::uint64_t stream) const {
    const std::int64_t s = c_.src_len, t = c_.tgt_len(), width = s + t;
    std::vector<std::int32_t> input(std::size_t(count * width), kPad), target(std::size_t(count * t), kIgnore);
    std::vector<std::int32_t> src_mask(std::size_t(count * s), 0), tgt_mask(std::size_t(count * t), 0);
    const std::int32_t content = std::int32_t(c_.vocab - 2);
    for (std::int64_t r = 0; r < count; ++r) {
      Rng rng;
      rng.set_state(seed_ ^ stream, std::uint64_t(first + r) << 20);
      const std::int64_t len = 2 + std::int64_t(rng.below(std::uint64_t(s - 1)));
      std::vector<std::int32_t> src(static_cast<std::size_t>(len)), out;
      for (auto& tok : src) tok = 2 + std::int32_t(rng.below(std::uint64_t(content)));
      for (std::int64_t p = len - 1; p >= 0; --p) out.push_back(2 + (3 * (src[std::size_t(p)] - 2) + 1) % content);
      out.push_back(kBoundary);
      for (std::int64_t p = 0; p < len; ++p) {
        input[std::size_t(r * width + p)] = src[std::size_t(p)];
        src_mask[std::size_t(r * s + p)] = 1;
      }
      for (std::size_t p = 0; p < out.size(); ++p) {
        input[std::size_t(r * width + s) + p] = p == 0 ? kBoundary : out[p - 1];
        target[std::size_t(r * t) + p] = out[p];
        tgt_mask[std::size_t(r * t) + p] = 1;
      }
    }
    data::MicroBatch b{.input = Tensor::from_vector(input, {count, width}),
                       .target = Tensor::from_vector(target, {count, t})};
    b.side["memory_mask"] = Tensor::from_vector(src_mask, {count, s});
    b.side["key_mask"] = Tensor::from_vector(tgt_mask, {count, t});
    return b;
  }

  Seq2SeqConfig c_;
  std::uint64_t seed_ = 0;
};

}  // namespace ht::examples
