// ht::nn::Embedding.
#include "ht/nn/embedding.h"

#include "ht/ops/embedding.h"
#include "ht/ops/elementwise.h"

namespace ht::nn {

Embedding::Embedding(std::string name, std::int64_t vocab_size, std::int64_t max_positions, std::int64_t dim,
                     Device device, TensorParallel tp, const std::string& token_name, const std::string& position_name,
                     std::int64_t padded_vocab)
    : Module(std::move(name)), tp_(tp), vocab_(vocab_size), rows_(padded_vocab > 0 ? padded_vocab : vocab_size) {
  HT_CHECK(vocab_size > 0 && dim > 0 && max_positions >= 0, ErrorKind::kConfig,
           "Embedding '{}': vocab_size={} and dim={} must be positive, max_positions={} non-negative", this->name(),
           vocab_size, dim, max_positions);
  HT_CHECK(rows_ >= vocab_size, ErrorKind::kConfig,
           "Embedding '{}': the padded vocabulary {} is smaller than the vocabulary {}", this->name(), rows_,
           vocab_size);
  HT_CHECK(rows_ % tp.size() == 0, ErrorKind::kConfig,
           "Embedding '{}': {} rows (vocab_size={}{}) do not split over tensor-parallel size {}; choose a --vocab-size "
           "divisible by --tp, or pad the vocabulary to a multiple of it",
           this->name(), rows_, vocab_size, rows_ != vocab_size ? fmt::format(", padded to {}", rows_) : "",
           tp.size());
  const ParamLayout vocab_split =
      tp.size() > 1 ? ParamLayout{.tp_split_dim = 0, .tp_rank = tp.rank(), .tp_size = tp.size()} : ParamLayout{};
  // PyTorch's nn.Embedding default: N(0, 1).
  wte_ = &add_parameter(token_name, {rows_, dim}, /*weight_decay=*/true, device, vocab_split, Init::normal(1.f));
  wte_->set_real_rows(vocab_size);
  if (max_positions > 0)
    wpe_ = &add_parameter(position_name, {max_positions, dim}, /*weight_decay=*/true, device, {}, Init::normal(1.f));
}

ops::VocabShard Embedding::shard() const {
  if (tp_.size() == 1 && rows_ == vocab_) return {};
  return {.start = tp_.rank() * (rows_ / tp_.size()), .size = vocab_, .padded_size = rows_ != vocab_ ? rows_ : -1};
}

Tensor Embedding::forward_impl(Context& ctx, const Tensor& tokens) {
  Tensor out = Tensor::empty({tokens.size(0), tokens.size(1), wte_->data().size(1)}, wte_->data().dtype(),
                             tokens.device());
  // Positions are added once: by tp rank 0, before the group sums the
  // lookups; under context parallelism, the rows of this rank's positions.
  const Tensor positions =
      wpe_ && tp_.rank() == 0 ? context_rows(wpe_->data(), cp_, tokens.size(1)) : Tensor();
  ops::embedding_forward(tokens, wte_->data(), positions, out, shard());
  tp_.all_reduce_sum(out);
  ctx.save(this, {tokens});
  return out;
}

Tensor Embedding::backward_impl(Context& ctx, const Tensor& dy) {
  const Tensor& tokens = ctx.saved(this).at(0);
  wte_->allocate_grad();
  Tensor no_wpe;
  if (wpe_) wpe_->allocate_grad();
  if (cp_.size() == 1 || !wpe_) {
    ops::embedding_backward(dy, tokens, wte_->grad(), wpe_ ? wpe_->grad() : no_wpe, shard());
  } else {
    // The gradient of this rank's position rows, added into their rows of wpe.
    const std::int64_t t = tokens.size(1), l = t / 2;
    Tensor rows = Tensor::zeros({t, wpe_->grad().size(1)}, wpe_->grad().dtype(), dy.device());
    ops::embedding_backward(dy, tokens, wte_->grad(), rows, shard());
    for (int half = 0; half < 2; ++half) {
      const std::int64_t start = cp_.half_start(half, t);
      Tensor mine = wpe_->grad().slice(start, start + l);
      ops::add(mine, rows.slice(half * l, half * l + l), mine);
    }
  }
  wte_->mark_grad_ready();
  if (wpe_) wpe_->mark_grad_ready();
  return Tensor();
}

}  // namespace ht::nn
